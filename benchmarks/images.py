"""Benchmark: shipyard's daemonless two-platform image against `docker build`, the bound of
writing the same layer bytes, and peak memory with ~500 MB of layers.

    python benchmarks/images.py [--runs 3] [--big-mb 500]

Needs scripts/services.sh (dockerd, the registry on 127.0.0.1, QEMU, the base layout).
Everything installs from local wheel files with no index, so nothing leaves loopback.
Targets: shipyard build+push <= 0.2x docker's; shipyard build <= 2x the layer-bytes
bound (tarfile + gzip + sha256 of the same files); peak RSS < 200 MB.
"""

from __future__ import annotations

import argparse
import base64
import ensurepip
import gzip
import hashlib
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

from shipyard.builders.image import ImageBuilder
from shipyard.engine.plan import Action
from shipyard.engine.run import wrapped
from shipyard.engine.scheduler import Artifact, BuildContext
from shipyard.manifest import Image as ImageSettings
from shipyard.oci.layer import GZIP_LEVEL
from shipyard.oci.layout import read_layout
from shipyard.oci.model import Platform
from shipyard.oci.remote.registry import Registry
from shipyard.stamp import Stamp

REPO = Path(__file__).resolve().parents[1]
PLATFORMS = ("linux/amd64", "linux/arm64")
REGISTRY = os.environ.get("SHIPYARD_REGISTRY", "127.0.0.1:5000")
BASE_LAYOUT = Path(
    os.environ.get("SHIPYARD_BASE_LAYOUT", REPO / ".shipyard" / "base" / "python-3.11")
)
BASE_REPO = f"{REGISTRY}/shipyard/python-base"
EPOCH = 1704067200


Files = Iterable[tuple[str, bytes]]


def _wheel(folder: Path, name: str, files: Files, requires: list[str]) -> Path:
    """A minimal valid wheel, written file by file (stored: big payloads are random)."""
    info = f"{name}-1.0.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    wheel = b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    extra = [(f"{info}/METADATA", meta.encode()), (f"{info}/WHEEL", wheel)]
    record = ""
    out = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for path, data in itertools.chain(files, extra):
            archive.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record += f"{path},sha256={digest.decode()},{len(data)}\n"
        archive.writestr(f"{info}/RECORD", record + f"{info}/RECORD,,\n")
    return out


def _wheelhouse(folder: Path, dep_files: Files) -> Path:
    folder.mkdir(parents=True)
    _wheel(folder, "benchdep", dep_files, [])
    main = b"import sys\n\ndef main():\n    print('benchapp 1.0')\n    return 0\n"
    files = [("benchapp/__init__.py", b""), ("benchapp/main.py", main)]
    app = _wheel(folder, "benchapp", files, ["benchdep"])
    pip = next((Path(ensurepip.__file__).parent / "_bundled").glob("pip-*.whl"))
    shutil.copy(pip, folder / pip.name)
    return app


def _source_files(total: int) -> Files:
    """Compressible, Python-like files summing to `total` bytes (a typical dependency)."""
    line = b"def function_%06d(value):\n    return value * %d + len(str(value))\n\n"
    for n in range(max(1, total // 40_000)):
        yield f"benchdep/mod{n:04d}.py", b"".join(line % (i, i) for i in range(600))


def _random_files(total: int) -> Files:
    """Incompressible files, made one at a time so this process stays small."""
    chunk = 8 << 20
    for n in range(total // chunk):
        yield f"benchdep/blob{n:03d}.bin", os.urandom(chunk)


def _shipyard_build(app: Path, house: Path, work: Path) -> Path:
    env = {
        **os.environ,
        "UV_OFFLINE": "1",
        "UV_NO_INDEX": "1",
        "UV_FIND_LINKS": str(house),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(house),
        "SHIPYARD_CACHE_DIR": str(work / "cache"),
    }
    stamp = Stamp("1.0", None, False, EPOCH)
    ctx = BuildContext(work, work / "dist", stamp, "3.11", env)
    settings = ImageSettings(base=f"oci-layout:{BASE_LAYOUT}")
    action = Action(
        "image:benchapp", "image", ("benchapp",), work, PLATFORMS, ("wheel",),
        entrypoint="benchapp.main:main", image=settings,
    )  # fmt: skip
    digest = hashlib.sha256(app.read_bytes()).hexdigest()
    artifact = Artifact("wheel", "", "py3-none-any", app, digest, app.stat().st_size)
    wrapped(ImageBuilder()).run(action, ctx, (artifact,))
    return work / "dist" / "images" / "benchapp"


def _push(layout: Path, repo: str) -> None:
    registry = Registry(REGISTRY, environ={})
    blobs = layout / "blobs" / "sha256"
    (top,) = json.loads((layout / "index.json").read_bytes())["manifests"]
    index = json.loads((blobs / top["digest"][7:]).read_bytes())
    for entry in index["manifests"]:
        manifest = json.loads((blobs / entry["digest"][7:]).read_bytes())
        for d in [manifest["config"], *manifest["layers"]]:
            registry.push_blob(repo, d["digest"], d["size"], blobs / d["digest"][7:])
        data = (blobs / entry["digest"][7:]).read_bytes()
        registry.put_manifest(repo, entry["digest"], data, entry["mediaType"])
    data = (blobs / top["digest"][7:]).read_bytes()
    registry.put_manifest(repo, "1.0", data, top["mediaType"])


def _docker(*args: str, cwd: Path | None = None) -> None:
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    done = subprocess.run(["docker", *args], cwd=cwd, env=env, capture_output=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"docker {' '.join(args)} failed:\n{done.stderr.decode()[-2000:]}")


def _base_digests() -> dict[str, str]:
    found = read_layout(BASE_LAYOUT, [Platform.parse(p) for p in PLATFORMS])
    return {str(p): digest for p, (_, digest) in found.items()}


def _docker_build_push(house: Path, work: Path, repo: str) -> None:
    """What a team does today: one classic `docker build` per platform, push, manifest list."""
    context = work / "context"
    shutil.copytree(house, context / "wheels")
    pip = next(p.name for p in house.glob("pip-*.whl"))
    tags = []
    for platform, digest in _base_digests().items():
        (context / "Dockerfile").write_text(
            f"FROM {BASE_REPO}@{digest}\nCOPY wheels /wheels\n"
            f"RUN python3 /wheels/{pip}/pip install --no-index --find-links /wheels"
            " --no-compile --target /opt/benchapp/site benchapp && rm -rf /wheels\n"
            "ENV PYTHONPATH=/opt/benchapp/site\n"
            'ENTRYPOINT ["python3", "-m", "benchapp.main"]\n'
        )
        tag = f"{REGISTRY}/{repo}:1.0-{platform.split('/')[1]}"
        _docker("build", "--no-cache", "--network", "none", "--platform", platform, "-t", tag, ".",
                cwd=context)  # fmt: skip
        _docker("push", tag)
        tags.append(tag)
    _docker("manifest", "create", "--insecure", f"{REGISTRY}/{repo}:1.0", *tags)
    _docker("manifest", "push", "--insecure", "--purge", f"{REGISTRY}/{repo}:1.0")
    for tag in tags:
        _docker("image", "rm", tag)


class _Hashing:
    """A file that hashes what it writes, as a registry client needs the digest."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.digest = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self.out.write(data)

    def flush(self) -> None:
        self.out.flush()


def _bound(layout: Path, work: Path) -> float:
    """Seconds to write the image's own layers again with tarfile + gzip + sha256 only."""
    found = read_layout(layout, [Platform.parse(p) for p in PLATFORMS])
    unique = {x.descriptor.digest: x for image, _ in found.values() for x in image.layers[-2:]}
    trees = []
    for n, layer in enumerate(unique.values()):
        tree = work / f"tree{n}"
        with tarfile.open(layer.path, "r:gz") as tar:
            tar.extractall(tree, filter="tar")
        trees.append(tree)
    start = time.perf_counter()
    for tree in trees:
        with tempfile.TemporaryFile(dir=work) as out:
            sink = _Hashing(out)
            with (
                gzip.GzipFile(fileobj=sink, mode="wb", compresslevel=GZIP_LEVEL, mtime=0) as gz,
                tarfile.open(fileobj=gz, mode="w|") as tar,
            ):
                for path in sorted(tree.rglob("*")):
                    tar.add(path, str(path.relative_to(tree)), recursive=False)
            sink.digest.hexdigest()
    return time.perf_counter() - start


def _timed(runs: int, step: Callable[[int], None]) -> float:
    times = []
    for n in range(runs):
        start = time.perf_counter()
        step(n)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _child(work: Path) -> None:
    """Build the big image in this process and report its peak RSS (MiB) and time."""
    start = time.perf_counter()
    _shipyard_build(work / "wheels" / "benchapp-1.0-py3-none-any.whl", work / "wheels", work)
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork and exec from the parent.
    status = Path("/proc/self/status").read_text()
    peak = int(next(ln for ln in status.splitlines() if ln.startswith("VmHWM:")).split()[1]) / 1024
    print(json.dumps({"peak_mib": peak, "seconds": time.perf_counter() - start}))


def main() -> None:
    """Run the three comparisons and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--app-mb", type=int, default=20, help="size of the pure dependency")
    parser.add_argument("--big-mb", type=int, default=500, help="random layer bytes")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child)
        return
    rows: list[tuple[str, float, float, str, float]] = []
    with tempfile.TemporaryDirectory(prefix="shipyard-bench-") as tmp:
        root = Path(tmp)
        house = root / "app" / "wheels"
        app = _wheelhouse(house, _source_files(args.app_mb << 20))
        for platform, digest in _base_digests().items():
            _docker("pull", "--platform", platform, f"{BASE_REPO}@{digest}")
        stamp = str(time.time_ns())

        def ours(n: int) -> None:
            work = root / f"ours{n}"
            layout = _shipyard_build(app, house, work)
            _push(layout, f"bench/shipyard-{stamp}-{n}")

        def theirs(n: int) -> None:
            _docker_build_push(house, root / f"docker{n}", f"bench/docker-{stamp}-{n}")

        shipyard = _timed(args.runs, ours)
        docker = _timed(args.runs, theirs)
        rows.append(("build+push vs docker build+push", shipyard, docker, "<= 0.2x", 0.2))

        def again(n: int) -> None:
            _shipyard_build(app, house, root / f"again{n}")

        build = _timed(args.runs, again)
        layout = root / "again0" / "dist" / "images" / "benchapp"
        bound = statistics.median(_bound(layout, root / f"bound{n}") for n in range(args.runs))
        rows.append(("build vs tar+gzip+sha256 bound", build, bound, "<= 2x", 2.0))

        big = root / "big"
        _wheelhouse(big / "wheels", _random_files(args.big_mb << 20))
        command = [sys.executable, __file__, "--child", str(big)]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        report = json.loads(done.stdout.strip().splitlines()[-1])
        big_bound = _bound(big / "dist" / "images" / "benchapp", big / "bound")
        rows.append(
            (f"{args.big_mb} MB build vs bound", report["seconds"], big_bound, "<= 2x", 2.0)
        )
    print(f"{'measure':36} {'shipyard':>10} {'reference':>10} {'ratio':>7}  target")
    for name, ours_s, ref_s, target, limit in rows:
        ratio = ours_s / ref_s
        miss = "" if ratio <= limit else "  MISSED"
        print(f"{name:36} {ours_s:9.2f}s {ref_s:9.2f}s {ratio:6.2f}x  {target}{miss}")
    peak = report["peak_mib"]
    miss = "" if peak < 200 else "  MISSED"
    label = f"peak RSS, {args.big_mb} MB image"
    print(f"{label:36} {peak:7.0f}MiB {'':>10} {'':>7}  < 200 MiB{miss}")
    print(f"(medians of {args.runs} runs; the {args.big_mb} MB build runs once)")


if __name__ == "__main__":
    main()
