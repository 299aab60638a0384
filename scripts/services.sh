#!/usr/bin/env bash
# Start the local services that shipyard's integration tests use:
#   * a Docker engine (dockerd without the default bridge: containers get
#     --network none or --network host only),
#   * a CNCF distribution registry on 127.0.0.1 (loopback only),
#   * qemu-user binfmt emulation for linux/arm64,
#   * a multi-arch (linux/amd64 + linux/arm64) Python base image built from
#     Debian packages with mmdebstrap, pushed to the registry as one index and
#     exported as an OCI image layout so builds need no registry, and two
#     flavours of it for image variants: `distroless` (python3-minimal and its
#     libraries, no shell, no package manager) and `debug` (the base plus
#     busybox and its applets),
#   * installed, not started: the shared-cache servers of the remote cache tests,
#     BuildGrid 0.4.4 in its own virtual environment and Debian's nginx (WebDAV),
# then write .shipyard/services.env for the tests and the tools.
#
# Idempotent: every step checks first and does nothing when already done.
# Usage: scripts/services.sh [--base | --stop | --help]     (as root)
#   --base: only the Python base image as an OCI layout (no dockerd, no registry)
#
# Environment (all optional):
#   SHIPYARD_REGISTRY_PORT   registry port on 127.0.0.1            (5000)
#   SHIPYARD_BASE_LAYOUT     OCI layout dir of the base image
#                            ($REPO/.shipyard/base/python-3.11); the flavours
#                            go beside it (python-3.11-distroless, -debug)
#   SHIPYARD_DEBIAN_SOURCES  apt sources file (.list or .sources) for mmdebstrap
#                            (default: derived from the host's apt sources)
#   SHIPYARD_WAIT_SECONDS    how long to wait for dockerd / the registry (60)
#   SHIPYARD_BUILDGRID_VENV  BuildGrid's virtual environment   (/opt/buildgrid-venv)
#   SOURCE_DATE_EPOCH        timestamp for the base image files      (1704067200)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

STATE_DIR=/var/lib/shipyard
RUN_DIR=/var/run/shipyard
CACHE_DIR=/var/cache/shipyard/base
REGISTRY_DIR=$STATE_DIR/registry
REGISTRY_CONFIG=$REGISTRY_DIR/config.yml
REGISTRY_PORT=${SHIPYARD_REGISTRY_PORT:-5000}
REGISTRY=127.0.0.1:$REGISTRY_PORT
DOCKERD_LOG=/var/log/shipyard-dockerd.log
REGISTRY_LOG=/var/log/shipyard-registry.log
DOCKERD_PID=$RUN_DIR/dockerd.pid
REGISTRY_PID=$RUN_DIR/registry.pid
WAIT_SECONDS=${SHIPYARD_WAIT_SECONDS:-60}

SUITE=bookworm
PY_VERSION=3.11
ARCHES=(amd64 arm64)
BASE_NAME=shipyard/python-base
BASE_TAG=$PY_VERSION
BASE_IMAGE=$REGISTRY/$BASE_NAME:$BASE_TAG
BASE_LAYOUT=${SHIPYARD_BASE_LAYOUT:-$REPO/.shipyard/base/python-$PY_VERSION}
# The base and its flavours: "" is the plain base (tag 3.11), the others are
# tagged 3.11-<flavour> and written beside it as <layout>-<flavour>.
FLAVOURS=("" distroless debug)
SERVICES_ENV=$REPO/.shipyard/services.env
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1704067200}

export DOCKER_HOST=unix:///var/run/docker.sock
export DEBIAN_FRONTEND=noninteractive
# graphviz reads `shipyard graph --format=dot` back; chromium and its WebDriver open the
# graph page and the docs site in the browser tests.
PACKAGES=(docker.io docker-registry skopeo qemu-user-static binfmt-support mmdebstrap
          python3-venv curl nginx-core graphviz chromium chromium-driver)
# BuildGrid, the Remote Execution API server of the remote cache tests: it installs on
# Python 3.11 only up to 0.4.x, so a pinned release in its own virtual environment.
BUILDGRID_VERSION=0.4.4
BUILDGRID_VENV=${SHIPYARD_BUILDGRID_VENV:-/opt/buildgrid-venv}

START=$SECONDS
log() { printf 'services: %s\n' "$*"; }
die() { printf 'services: ERROR: %s\n' "$*" >&2; exit 1; }

# The system Python runs the small helpers below (JSON, OCI layout, ELF probe).
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

# ---------------------------------------------------------------------------
# Python helpers (stdlib only): py SUBCOMMAND ARGS...
# ---------------------------------------------------------------------------
read -r -d '' PYHELPER <<'PY' || true
import datetime
import glob
import gzip
import hashlib
import json
import os
import struct
import sys

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZ = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
WANT_PLATFORMS = [("linux", "amd64"), ("linux", "arm64")]


def sources(suite, out):
    """Debian archive entries of the host's apt sources, for the target suite."""
    wanted = {suite, suite + "-updates", suite + "-security", suite + "/updates"}
    found = []

    def keep(types, uris, suites, signed_by):
        if "deb" not in types:
            return
        # Only the Debian archive itself: third-party repos carry their own key.
        if signed_by and "debian-archive" not in signed_by:
            return
        for uri in uris:
            for s in suites:
                if s in wanted:
                    opts = f"[signed-by={signed_by}] " if signed_by else ""
                    line = f"deb {opts}{uri} {s} main"
                    if line not in found:
                        found.append(line)

    one_line = ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]
    for path in one_line:
        if not os.path.isfile(path):
            continue
        for raw in open(path, encoding="utf-8"):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            signed_by = ""
            if "[" in line and "]" in line:
                head, rest = line.split("[", 1)
                opts, tail = rest.split("]", 1)
                for opt in opts.split():
                    k, _, v = opt.partition("=")
                    if k.lower() == "signed-by":
                        signed_by = v
                line = head + tail
            words = line.split()
            if len(words) >= 3:
                keep([words[0]], [words[1]], [words[2]], signed_by)

    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        text = open(path, encoding="utf-8").read()
        for para in text.split("\n\n"):
            fields, key = {}, None
            for raw in para.splitlines():
                if raw.startswith("#"):
                    continue
                if raw[:1] in (" ", "\t") and key:
                    fields[key] += "\n" + raw.strip()
                    continue
                if ":" in raw:
                    key, _, value = raw.partition(":")
                    key = key.strip().lower()
                    fields[key] = value.strip()
            if not fields or fields.get("enabled", "yes").lower() == "no":
                continue
            signed_by = fields.get("signed-by", "")
            if "\n" in signed_by:  # an inline key block, not a Debian keyring path
                continue
            keep(
                fields.get("types", "").split(),
                fields.get("uris", "").split(),
                fields.get("suites", "").split(),
                signed_by,
            )

    if not any(f" {suite} " in line for line in found):
        sys.exit(f"services: ERROR: no '{suite}' entry of the Debian archive in the host's"
                 " apt sources; set SHIPYARD_DEBIAN_SOURCES to a sources file")
    with open(out, "w", encoding="utf-8") as fh:
        fh.write("\n".join(found) + "\n")


def _dump(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _blob(layout, data):
    digest = hashlib.sha256(data).hexdigest()
    path = os.path.join(layout, "blobs", "sha256", digest)
    with open(path, "wb") as fh:
        fh.write(data)
    return "sha256:" + digest, len(data)


class _HashWriter:
    def __init__(self, fh):
        self.fh, self.hash, self.size = fh, hashlib.sha256(), 0

    def write(self, data):
        self.hash.update(data)
        self.size += len(data)
        return self.fh.write(data)

    def flush(self):
        self.fh.flush()


def _layer(layout, tar_path):
    tmp = os.path.join(layout, "blobs", "sha256", ".layer.tmp")
    diff = hashlib.sha256()
    with open(tar_path, "rb") as src, open(tmp, "wb") as dst:
        writer = _HashWriter(dst)
        with gzip.GzipFile(filename="", mode="wb", fileobj=writer, mtime=0) as gz:
            while chunk := src.read(1 << 20):
                diff.update(chunk)
                gz.write(chunk)
    digest = writer.hash.hexdigest()
    os.replace(tmp, os.path.join(layout, "blobs", "sha256", digest))
    return "sha256:" + digest, writer.size, "sha256:" + diff.hexdigest()


def oci_build(layout, tag, epoch, *arch_tars):
    """One OCI layout holding a per-arch image for each tar plus their index."""
    os.makedirs(os.path.join(layout, "blobs", "sha256"))
    created = datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc)
    created = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    entries, refs = [], []
    for pair in arch_tars:
        arch, tar_path = pair.split("=", 1)
        platform = {"architecture": arch, "os": "linux"}
        if arch == "arm64":
            platform["variant"] = "v8"
        digest, size, diff_id = _layer(layout, tar_path)
        config = {
            **platform,
            "created": created,
            "config": {
                "Env": [
                    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "LANG=C.UTF-8",
                ],
                "Cmd": ["python3"],
            },
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [
                {
                    "created": created,
                    "created_by": os.environ.get(
                        "BASE_CREATED_BY",
                        "mmdebstrap --variant=essential --include=python3,ca-certificates",
                    )
                    + " (shipyard scripts/services.sh)",
                }
            ],
        }
        cdigest, csize = _blob(layout, _dump(config))
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": cdigest, "size": csize},
            "layers": [{"mediaType": OCI_LAYER_GZ, "digest": digest, "size": size}],
        }
        mdigest, msize = _blob(layout, _dump(manifest))
        desc = {"mediaType": OCI_MANIFEST, "digest": mdigest, "size": msize}
        entries.append({**desc, "platform": platform})
        refs.append({**desc, "annotations": {"org.opencontainers.image.ref.name": f"{tag}-{arch}"}})
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}
    idigest, isize = _blob(layout, _dump(index))
    top = {
        "mediaType": OCI_INDEX,
        "digest": idigest,
        "size": isize,
        "annotations": {"org.opencontainers.image.ref.name": tag},
    }
    with open(os.path.join(layout, "index.json"), "wb") as fh:
        fh.write(_dump({"schemaVersion": 2, "manifests": [top, *refs]}))
    with open(os.path.join(layout, "oci-layout"), "wb") as fh:
        fh.write(_dump({"imageLayoutVersion": "1.0.0"}))


def _platforms(index):
    return sorted((m["platform"]["os"], m["platform"]["architecture"]) for m in index["manifests"])


def index_digest(raw_path):
    """Print the digest of a raw index (skopeo inspect --raw) if it has both platforms."""
    data = open(raw_path, "rb").read()
    try:
        index = json.loads(data)
        ok = index.get("mediaType") in (OCI_INDEX, DOCKER_LIST)
        ok = ok and _platforms(index) == WANT_PLATFORMS
    except (ValueError, KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        sys.exit(1)
    print("sha256:" + hashlib.sha256(data).hexdigest())


def layout_has(layout, digest):
    """Exit 0 if the layout's index.json holds DIGEST and every blob below it exists."""
    def blob(d):
        return os.path.join(layout, "blobs", *d.split(":", 1))

    try:
        top = json.load(open(os.path.join(layout, "index.json"), encoding="utf-8"))
        if digest not in [m["digest"] for m in top["manifests"]]:
            sys.exit(1)
        index = json.load(open(blob(digest), encoding="utf-8"))
        if _platforms(index) != WANT_PLATFORMS:
            sys.exit(1)
        for entry in index["manifests"]:
            manifest = json.load(open(blob(entry["digest"]), encoding="utf-8"))
            for d in [manifest["config"], *manifest["layers"]]:
                if os.path.getsize(blob(d["digest"])) != d["size"]:
                    sys.exit(1)
    except (OSError, ValueError, KeyError, TypeError):
        sys.exit(1)


def aarch64_probe(path):
    """A 132-byte static linux/arm64 ELF that exits with status 42."""
    base, ehsize, phsize = 0x400000, 64, 56
    code = struct.pack("<III", 0xD2800540, 0xD2800BA8, 0xD4000001)  # mov x0,#42; mov x8,#93; svc 0
    total = ehsize + phsize + len(code)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    ehdr = struct.pack("<16sHHIQQQIHHHHHH", ident, 2, 183, 1, base + ehsize + phsize,
                       ehsize, 0, 0, ehsize, phsize, 1, 0, 0, 0)
    phdr = struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, total, total, 0x1000)
    with open(path, "wb") as fh:
        fh.write(ehdr + phdr + code)
    os.chmod(path, 0o755)


COMMANDS = {
    "sources": sources,
    "oci-build": oci_build,
    "index-digest": index_digest,
    "layout-has": layout_has,
    "aarch64-probe": aarch64_probe,
}
COMMANDS[sys.argv[1]](*sys.argv[2:])
PY
py() { "$PY" -c "$PYHELPER" "$@"; }

# ---------------------------------------------------------------------------
# Process helpers
# ---------------------------------------------------------------------------
# pid_alive PIDFILE COMM: the pid in PIDFILE is a live process named COMM.
pid_alive() {
    local pid
    [ -s "$1" ] || return 1
    pid=$(cat "$1")
    [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$2" ]
}

# stop_pidfile PIDFILE COMM NAME
stop_pidfile() {
    local pid i
    if ! pid_alive "$1" "$2"; then
        rm -f "$1"
        log "$3 not running (no live pid in $1)"
        return 0
    fi
    pid=$(cat "$1")
    log "stopping $3 (pid $pid)"
    kill -TERM "$pid"
    for ((i = 0; i < 30; i++)); do
        [ -d "/proc/$pid" ] || break
        sleep 1
    done
    if [ -d "/proc/$pid" ]; then
        log "$3 still running after 30s, sending SIGKILL"
        kill -KILL "$pid" || true
    fi
    rm -f "$1"
}

docker_ok() { timeout 15 docker info >/dev/null 2>&1 </dev/null; }

registry_code() {
    curl -s -o /dev/null -w '%{http_code}' --noproxy '*' --max-time 5 \
        "http://$REGISTRY/v2/" 2>/dev/null || true
}

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }

# ---------------------------------------------------------------------------
case "${1:-}" in
    "") ;;
    --stop) MODE=stop ;;
    --base) MODE=base ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option: $1 (try --help)" ;;
esac
MODE=${MODE:-start}

[ "$(id -u)" = 0 ] || die "run as root (installs packages, starts dockerd, mounts binfmt_misc)"
case "$REGISTRY_PORT" in
    ''|*[!0-9]*) die "SHIPYARD_REGISTRY_PORT must be a port number, got '$REGISTRY_PORT'" ;;
esac
mkdir -p "$RUN_DIR" "$REGISTRY_DIR" "$CACHE_DIR"

# One run at a time (a second concurrent run waits for the first).
exec 9>"$RUN_DIR/services.lock"
flock -w 3600 9 || die "another scripts/services.sh run holds $RUN_DIR/services.lock"

if [ "$MODE" = stop ]; then
    stop_pidfile "$REGISTRY_PID" docker-registry "registry"
    stop_pidfile "$DOCKERD_PID" dockerd "dockerd"
    exit 0
fi

# ---------------------------------------------------------------------------
# 1. Packages
# ---------------------------------------------------------------------------
missing=()
for pkg in "${PACKAGES[@]}"; do
    if [ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null)" != installed ]; then
        missing+=("$pkg")
    fi
done
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${missing[*]}"
    # Keep the packages' own services (docker.service with its default bridge,
    # the packaged registry on all interfaces) from starting on install.
    policy_rc=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        policy_rc=/usr/sbin/policy-rc.d
        printf '#!/bin/sh\nexit 101\n' >"$policy_rc"
        chmod 755 "$policy_rc"
        trap 'rm -f "$policy_rc"' EXIT
    fi
    apt-get update -q </dev/null
    apt-get install -y -q "${missing[@]}" </dev/null
    if [ -n "$policy_rc" ]; then
        rm -f "$policy_rc"
        trap - EXIT
    fi
else
    log "packages present"
fi

if [ "$MODE" != base ]; then
# ---------------------------------------------------------------------------
# 2. Docker engine
# ---------------------------------------------------------------------------
if docker_ok; then
    log "dockerd already answering on $DOCKER_HOST"
else
    if pid_alive "$DOCKERD_PID" dockerd; then
        log "dockerd (pid $(cat "$DOCKERD_PID")) is up but not answering yet, waiting"
    else
        log "starting dockerd (log: $DOCKERD_LOG)"
        setsid nohup dockerd --host="$DOCKER_HOST" --bridge=none --iptables=false \
            --ip-forward=false --ip-masq=false >>"$DOCKERD_LOG" 2>&1 </dev/null 9>&- &
        echo $! >"$DOCKERD_PID"
    fi
    deadline=$((SECONDS + WAIT_SECONDS))
    until docker_ok; do
        if ! pid_alive "$DOCKERD_PID" dockerd || [ "$SECONDS" -ge "$deadline" ]; then
            tail -n 25 "$DOCKERD_LOG" >&2 || true
            die "dockerd did not answer within ${WAIT_SECONDS}s (log above: $DOCKERD_LOG)"
        fi
        sleep 1
    done
fi
log "dockerd: $(docker info --format \
    'server {{.ServerVersion}}, storage {{.Driver}}, cgroup {{.CgroupDriver}} v{{.CgroupVersion}}' \
    </dev/null)"
if docker network inspect bridge >/dev/null 2>&1 </dev/null; then
    log "warning: this dockerd has the default bridge network; tests use only" \
        "--network none / --network host"
fi

# ---------------------------------------------------------------------------
# 3. Registry on 127.0.0.1:$REGISTRY_PORT
# ---------------------------------------------------------------------------
code=$(registry_code)
if [ "$code" != 200 ] && [ "$code" != 000 ] && [ -d /run/systemd/system ] \
    && systemctl is-active --quiet docker-registry.service 2>/dev/null; then
    # The Debian package's own service (all interfaces, htpasswd auth) holds the port.
    log "port $REGISTRY_PORT is held by the packaged docker-registry.service; disabling it"
    systemctl disable --now docker-registry.service </dev/null
    code=$(registry_code)
fi
if [ "$code" = 200 ]; then
    log "registry already answering at http://$REGISTRY/v2/"
else
    [ "$code" = 000 ] || die "http://$REGISTRY/v2/ answers HTTP $code: something else holds" \
        "port $REGISTRY_PORT; stop it or set SHIPYARD_REGISTRY_PORT"
    if pid_alive "$REGISTRY_PID" docker-registry \
        && ! grep -qx "  addr: 127.0.0.1:$REGISTRY_PORT" "$REGISTRY_CONFIG" 2>/dev/null; then
        # Ours, but started for another SHIPYARD_REGISTRY_PORT.
        stop_pidfile "$REGISTRY_PID" docker-registry "registry (other port)"
    fi
    if ! pid_alive "$REGISTRY_PID" docker-registry; then
        mkdir -p "$REGISTRY_DIR/data"
        cat >"$REGISTRY_CONFIG" <<EOF
# Written by scripts/services.sh
version: 0.1
log:
  level: info
  fields:
    service: shipyard-registry
storage:
  filesystem:
    rootdirectory: $REGISTRY_DIR/data
  delete:
    enabled: true
  cache:
    blobdescriptor: inmemory
http:
  addr: 127.0.0.1:$REGISTRY_PORT
  headers:
    X-Content-Type-Options: [nosniff]
EOF
        log "starting registry on $REGISTRY (log: $REGISTRY_LOG)"
        setsid nohup docker-registry serve "$REGISTRY_CONFIG" >>"$REGISTRY_LOG" 2>&1 </dev/null 9>&- &
        echo $! >"$REGISTRY_PID"
    fi
    deadline=$((SECONDS + WAIT_SECONDS))
    until [ "$(registry_code)" = 200 ]; do
        if ! pid_alive "$REGISTRY_PID" docker-registry || [ "$SECONDS" -ge "$deadline" ]; then
            tail -n 15 "$REGISTRY_LOG" >&2 || true
            die "registry did not answer at http://$REGISTRY/v2/ within ${WAIT_SECONDS}s" \
                "(log above: $REGISTRY_LOG)"
        fi
        sleep 0.5
    done
    log "registry answering at http://$REGISTRY/v2/"
fi

fi  # not --base

# ---------------------------------------------------------------------------
# 4. binfmt: run linux/arm64 binaries through qemu-user-static
# ---------------------------------------------------------------------------
BINFMT=/proc/sys/fs/binfmt_misc
if ! mountpoint -q "$BINFMT"; then
    log "mounting binfmt_misc"
    mount -t binfmt_misc binfmt_misc "$BINFMT"
fi
if [ "$(head -n 1 "$BINFMT/qemu-aarch64" 2>/dev/null)" != enabled ]; then
    log "enabling qemu-aarch64 binfmt"
    update-binfmts --enable qemu-aarch64 </dev/null
fi
[ "$(head -n 1 "$BINFMT/qemu-aarch64" 2>/dev/null)" = enabled ] \
    || die "qemu-aarch64 binfmt is not enabled ($BINFMT/qemu-aarch64)"
grep -q '^flags:.*F' "$BINFMT/qemu-aarch64" \
    || die "qemu-aarch64 binfmt lacks the F (fix-binary) flag: it would not work in containers"
probe=$RUN_DIR/aarch64-probe
py aarch64-probe "$probe"
set +e
"$probe"
rc=$?
set -e
[ "$rc" = 42 ] || die "a static linux/arm64 probe binary did not run under qemu (exit $rc)"
log "qemu-aarch64 binfmt enabled (F flag), arm64 probe binary runs"

# ---------------------------------------------------------------------------
# 5. Base rootfs tarballs (cached), one per flavour and architecture
# ---------------------------------------------------------------------------
# What each flavour installs, and what its customize hook does ("$1" is the
# root; the hook runs on the host, `chroot "$1"` runs in the target, arm64
# through qemu). distroless: python3-minimal and the standard library with
# their libraries and CA certificates, then every shell, the package managers
# (dpkg, apt) and perl deleted; dpkg's status file stays for scanners.
# debug: the base plus busybox, its applets linked into /usr/local/bin where
# the base has no command of that name.
# shellcheck disable=SC2016  # "$1" is expanded by the hook's shell
DISTROLESS_HOOK='cd "$1" && rm -rf usr/bin/sh usr/bin/dash usr/bin/bash usr/bin/rbash usr/bin/sh.distrib usr/bin/dpkg* usr/sbin/dpkg* usr/bin/apt* usr/lib/apt usr/lib/dpkg usr/share/dpkg usr/bin/perl* usr/share/perl* usr/lib/*/perl* usr/bin/update-alternatives var/lib/dpkg/info etc/shells'
# shellcheck disable=SC2016
DEBUG_HOOK='chroot "$1" /bin/sh -c "for a in \$(busybox --list); do command -v \"\$a\" >/dev/null 2>&1 || ln -s /usr/bin/busybox \"/usr/local/bin/\$a\"; done"'
flavour_include() {
    case "$1" in
        # libstdc++6 (with libgcc-s1, already essential): what manylinux wheels with C++
        # in them (greenlet, onnxruntime, grpcio ...) load. distroless stays without it,
        # the slim base the native library check refuses such images on.
        "") echo python3,ca-certificates,libstdc++6 ;;
        distroless) echo "python3-minimal,libpython$PY_VERSION-stdlib,ca-certificates" ;;
        debug) echo python3,ca-certificates,libstdc++6,busybox ;;
    esac
}
flavour_hook() {
    case "$1" in
        distroless) echo "$DISTROLESS_HOOK" ;;
        debug) echo "$DEBUG_HOOK" ;;
        *) echo true ;;
    esac
}
# flavour_suffix FLAVOUR: "" or "-<flavour>", for tags, tarballs and layouts.
flavour_suffix() { if [ -n "$1" ]; then echo "-$1"; fi; }
created_by() { echo "mmdebstrap --variant=essential --include=$(flavour_include "$1")${1:+ ($1)}"; }

# rootfs_ok FLAVOUR TAR: the tarball holds what the flavour promises.
rootfs_ok() {
    local names
    names=$(tar -tf "$2" | sed -e 's|^\./||')
    grep -qx 'usr/bin/python3' <<<"$names" || return 1
    case "$1" in
        distroless)
            ! grep -qxE '(usr/)?bin/(sh|dash|bash|dpkg|apt|apt-get|perl)' <<<"$names" ;;
        debug) grep -qx 'usr/bin/busybox' <<<"$names" && grep -q '/libstdc++\.so\.6$' <<<"$names" ;;
        *) grep -q '/libstdc++\.so\.6$' <<<"$names" ;;
    esac
}

build_rootfs() {
    local flavour=$1 arch=$2 out=$3 tmp sources buildlog aptopts=() line
    tmp=$CACHE_DIR/.python-$PY_VERSION$(flavour_suffix "$flavour")-$arch.$$.tar
    # Named per build: builds run side by side, and $$ is the script's in each.
    sources=$CACHE_DIR/.sources$(flavour_suffix "$flavour")-$arch.$$.list
    buildlog=/var/log/shipyard-mmdebstrap$(flavour_suffix "$flavour")-$arch.log
    if [ -n "${SHIPYARD_DEBIAN_SOURCES:-}" ]; then
        [ -f "$SHIPYARD_DEBIAN_SOURCES" ] || die "SHIPYARD_DEBIAN_SOURCES: no such file"
        case "$SHIPYARD_DEBIAN_SOURCES" in
            *.sources) sources=${sources%.list}.sources ;;
        esac
        cp "$SHIPYARD_DEBIAN_SOURCES" "$sources"
    else
        py sources "$SUITE" "$sources"
    fi
    # The host's apt settings that reaching its mirror may depend on.
    while IFS= read -r line; do
        aptopts+=("--aptopt=$line")
    done < <(apt-config dump | grep -E '^Acquire::(Check-Valid-Until|Check-Date|https?::Proxy)[ :]' || true)
    log "building python${flavour:+ $flavour} base rootfs for $arch with mmdebstrap (log: $buildlog)"
    # shellcheck disable=SC2016  # "$1" is expanded by the hook's shell
    if ! mmdebstrap --mode=root --variant=essential --include="$(flavour_include "$flavour")" \
        --architectures="$arch" --format=tar --skip=output/dev \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        "${aptopts[@]}" \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/lintian/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --customize-hook='rm -f "$1"/etc/resolv.conf "$1"/etc/hostname "$1"/etc/apt/sources.list "$1"/etc/apt/apt.conf.d/99mmdebstrap; rm -rf "$1"/etc/apt/sources.list.d/*' \
        --customize-hook="$(flavour_hook "$flavour")" \
        "$SUITE" "$tmp" "$sources" </dev/null >"$buildlog" 2>&1; then
        rm -f "$tmp" "$sources"
        tail -n 25 "$buildlog" >&2 || true
        die "mmdebstrap failed for $arch${flavour:+ ($flavour)} (log above: $buildlog)"
    fi
    rm -f "$sources"
    if ! rootfs_ok "$flavour" "$tmp"; then
        rm -f "$tmp"
        die "the ${flavour:-plain} $arch rootfs lacks what it promises (log: $buildlog)"
    fi
    mv "$tmp" "$out"
}

# flavour_id FLAVOUR: a short digest of the flavour's package list, in its tarballs'
# names, so a machine with bases of an older list builds (and pushes) them again.
flavour_id() { flavour_include "$1" | sha256sum | cut -c1-8; }
rootfs_tar() { echo "$CACHE_DIR/python-$PY_VERSION$(flavour_suffix "$1")-$(flavour_id "$1")-$2.tar"; }
# flavour_inputs FLAVOUR: the tarballs a flavour's image is made of, one per line.
flavour_inputs() {
    local arch
    for arch in "${ARCHES[@]}"; do rootfs_tar "$1" "$arch"; done
}

# The missing tarballs are built two at a time, in the background (the machine
# has two cores; an arm64 build runs its package scripts under QEMU and takes
# about two minutes, an amd64 one about 20 s): arm64 first, the longest. Any
# build that fails stops the script once the running ones have ended.
BUILD_JOBS=2
missing=()
for arch in $(printf '%s\n' "${ARCHES[@]}" | sort -r); do  # arm64 before amd64
    for flavour in "${FLAVOURS[@]}"; do
        tar_path=$(rootfs_tar "$flavour" "$arch")
        if [ -s "$tar_path" ]; then
            log "base rootfs cached: $tar_path"
        else
            missing+=("$flavour:$arch")
        fi
    done
done
running=0
failed=0
for job in "${missing[@]}"; do
    if [ "$running" -ge "$BUILD_JOBS" ]; then
        wait -n || failed=1
        running=$((running - 1))
    fi
    [ "$failed" = 0 ] || break
    (
        flavour=${job%%:*} arch=${job#*:}
        tar_path=$(rootfs_tar "$flavour" "$arch")
        t0=$SECONDS
        build_rootfs "$flavour" "$arch" "$tar_path"
        log "built $tar_path ($(du -h "$tar_path" | cut -f1), $((SECONDS - t0))s)"
    ) &
    running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
    wait -n || failed=1
    running=$((running - 1))
done
[ "$failed" = 0 ] || die "a base rootfs build failed (its error is above)"

# flavour_layout FLAVOUR: the OCI layout folder of the base or of a flavour.
flavour_layout() { echo "$(realpath -m "$BASE_LAYOUT")$(flavour_suffix "$1")"; }
# oci_build_flavour FLAVOUR DIR TAG: the flavour's two-arch image as an OCI layout.
oci_build_flavour() {
    local arch_tars=() arch
    for arch in "${ARCHES[@]}"; do
        arch_tars+=("$arch=$(rootfs_tar "$1" "$arch")")
    done
    BASE_CREATED_BY=$(created_by "$1") py oci-build "$2" "$3" "$SOURCE_DATE_EPOCH" "${arch_tars[@]}"
}

if [ "$MODE" = base ]; then
    # No registry: write each two-arch base straight into its OCI layout.
    for flavour in "${FLAVOURS[@]}"; do
        layout=$(flavour_layout "$flavour")
        if [ -f "$layout/index.json" ] && [ "$(cat "$layout.inputs" 2>/dev/null)" = "$(flavour_inputs "$flavour")" ]; then
            log "OCI layout present: $layout"
            continue
        fi
        mkdir -p "$(dirname "$layout")"
        tmp_layout=$(dirname "$layout")/.$(basename "$layout").tmp.$$
        rm -rf "$tmp_layout"
        oci_build_flavour "$flavour" "$tmp_layout" "$BASE_TAG$(flavour_suffix "$flavour")"
        rm -rf "$layout"
        mv "$tmp_layout" "$layout"
        flavour_inputs "$flavour" >"$layout.inputs"
        log "wrote the linux/amd64 + linux/arm64 ${flavour:-plain} base to $layout"
    done
    log "base ready in $((SECONDS - START))s"
    exit 0
fi

# ---------------------------------------------------------------------------
# 6. Multi-arch base images in the registry and as OCI layouts
# ---------------------------------------------------------------------------
# (docker 20.10's `docker import --platform` ignores the architecture, moby
# issue 42813, so the per-arch images and their index are written as an OCI
# layout here and pushed with skopeo, keeping their digests.)
raw=$RUN_DIR/base-index.json
registry_index() {
    skopeo inspect --raw --tls-verify=false "docker://$1" >"$raw" 2>/dev/null </dev/null \
        && py index-digest "$raw"
}
# publish_base FLAVOUR: push the flavour's index (once) and export it as a layout.
publish_base() {
    local flavour=$1 tag image layout digest build ref tmp_layout marker
    tag=$BASE_TAG$(flavour_suffix "$flavour")
    image=$REGISTRY/$BASE_NAME:$tag
    layout=$(flavour_layout "$flavour")
    marker=$STATE_DIR/base$(flavour_suffix "$flavour").inputs  # what the pushed one is made of
    if [ "$(cat "$marker" 2>/dev/null)" = "$(flavour_inputs "$flavour")" ] \
        && digest=$(registry_index "$image"); then
        log "registry has $image (linux/amd64 + linux/arm64, $digest)"
    else
        build=$STATE_DIR/oci-build
        rm -rf "$build"
        log "writing OCI images of the ${flavour:-plain} base for ${ARCHES[*]}"
        oci_build_flavour "$flavour" "$build" "$tag"
        for ref in "${ARCHES[@]/#/$tag-}" "$tag"; do
            log "pushing $REGISTRY/$BASE_NAME:$ref"
            skopeo copy --quiet --all --preserve-digests --dest-tls-verify=false \
                "oci:$build:$ref" "docker://$REGISTRY/$BASE_NAME:$ref" </dev/null
        done
        rm -rf "$build"
        digest=$(registry_index "$image") \
            || die "$image is not a linux/amd64 + linux/arm64 index after push"
        flavour_inputs "$flavour" >"$marker"
        log "pushed $image ($digest)"
    fi
    if py layout-has "$layout" "$digest"; then
        log "OCI layout up to date: $layout"
    else
        log "exporting $image to OCI layout $layout"
        mkdir -p "$(dirname "$layout")"
        tmp_layout=$(dirname "$layout")/.$(basename "$layout").tmp.$$
        rm -rf "$tmp_layout"
        skopeo copy --quiet --all --preserve-digests --src-tls-verify=false \
            "docker://$image" "oci:$tmp_layout:$tag" </dev/null
        py layout-has "$tmp_layout" "$digest" || die "exported layout $tmp_layout is incomplete"
        rm -rf "$layout"
        mv "$tmp_layout" "$layout"
    fi
}
for flavour in "${FLAVOURS[@]}"; do
    publish_base "$flavour"
done
BASE_LAYOUT=$(flavour_layout "")

# ---------------------------------------------------------------------------
# 6b. Shared-cache servers (installed here; the remote cache tests start their own
#     on free 127.0.0.1 ports: tests/integration/cacheservers.py)
# ---------------------------------------------------------------------------
buildgrid_version() {
    "$BUILDGRID_VENV/bin/python" -c \
        'import importlib.metadata as m; print(m.version("buildgrid"))' 2>/dev/null
}
if [ "$(buildgrid_version)" = "$BUILDGRID_VERSION" ] && [ -x "$BUILDGRID_VENV/bin/bgd" ]; then
    log "BuildGrid $BUILDGRID_VERSION present in $BUILDGRID_VENV"
else
    log "installing BuildGrid $BUILDGRID_VERSION into its own virtual environment $BUILDGRID_VENV"
    rm -rf "$BUILDGRID_VENV"
    "$PY" -m venv "$BUILDGRID_VENV"
    "$BUILDGRID_VENV/bin/python" -m pip install -q "buildgrid==$BUILDGRID_VERSION" </dev/null
    [ "$(buildgrid_version)" = "$BUILDGRID_VERSION" ] || die "BuildGrid did not install"
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
"$NGINX" -V 2>&1 | grep -q -- '--with-http_dav_module' \
    || die "$NGINX has no WebDAV module (http_dav_module): install Debian's nginx-core"

# ---------------------------------------------------------------------------
# 7. services.env
# ---------------------------------------------------------------------------
mkdir -p "$(dirname "$SERVICES_ENV")"
cat >"$SERVICES_ENV.tmp" <<EOF
SHIPYARD_REGISTRY=$REGISTRY
SHIPYARD_BASE_IMAGE=$BASE_IMAGE
SHIPYARD_BASE_LAYOUT=$BASE_LAYOUT
SHIPYARD_BASE_DISTROLESS=$BASE_IMAGE-distroless
SHIPYARD_BASE_DISTROLESS_LAYOUT=$(flavour_layout distroless)
SHIPYARD_BASE_DEBUG=$BASE_IMAGE-debug
SHIPYARD_BASE_DEBUG_LAYOUT=$(flavour_layout debug)
DOCKER_HOST=$DOCKER_HOST
SHIPYARD_BUILDGRID=$BUILDGRID_VENV/bin/bgd
SHIPYARD_NGINX=$NGINX
EOF
mv "$SERVICES_ENV.tmp" "$SERVICES_ENV"
log "wrote $SERVICES_ENV"
log "services ready in $((SECONDS - START))s"
