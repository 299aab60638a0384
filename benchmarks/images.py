"""Benchmark: shipyard's daemonless two-platform image of black against docker's classic
builder doing the same work, the bound of writing the same layer bytes, and peak memory
with ~500 MB of layers.

    python benchmarks/images.py [--runs 3] [--big-mb 500] [--skip-big]

Both sides start from the same wheelhouse (a wrapper project's wheel depending on black,
and black's locked set for linux/amd64 and linux/arm64, repacked from uv's offline
installs) and end with the same thing: a two-platform image pushed to the registry on
127.0.0.1 under one tag. Docker builds one image per platform (`pip install` from the
wheelhouse, arm64 under QEMU), pushes both and a manifest list; shipyard resolves,
layers and writes its OCI layout, then pushes it. Docker's base is pulled first, and
shipyard's cache warmed by one untimed build likewise; shipyard is measured with that
cache (warm: the dependency layer is reused, the base known) and with a new cache folder
each run (cold: the base's layers checked, every layer made), taking turns with docker.
Each side's phases are printed, and the bytes each image build wrote to disk (shipyard:
this process and its children; docker: dockerd and containerd, not the build's
containers) next to the image's size.
Targets: shipyard build+push <= 0.2x docker's, warm and cold; the cold build <= 2x the
layer-bytes bound (tarfile + gzip + sha256 of the same files); peak RSS < 200 MB.
Needs scripts/services.sh (dockerd, the registry, QEMU, the base layout) and black in
uv's cache (`uv pip install --offline` must find it).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import csv
import ensurepip
import gzip
import hashlib
import itertools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from math import inf
from pathlib import Path
from typing import IO, Any

import shipyard.builders.image as image_builder
import shipyard.builders.image.native as image_native
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
UV_PLATFORMS = ("x86_64-manylinux_2_28", "aarch64-manylinux_2_28")
BLACK = "black==26.10.1"
REGISTRY = os.environ.get("SHIPYARD_REGISTRY", "127.0.0.1:5000")
BASE_LAYOUT = Path(
    os.environ.get("SHIPYARD_BASE_LAYOUT", REPO / ".shipyard" / "base" / "python-3.11")
)
BASE_REPO = f"{REGISTRY}/shipyard/python-base"
EPOCH = 1704067200
MB = 1 << 20

Files = Iterable[tuple[str, bytes]]
Phases = dict[str, float]


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


def _app(folder: Path, requires: list[str]) -> Path:
    """The wrapper project's wheel, and pip's for docker's side."""
    folder.mkdir(parents=True, exist_ok=True)
    main = b"import sys\n\ndef main():\n    print('benchapp 1.0')\n    return 0\n"
    files = [("benchapp/__init__.py", b""), ("benchapp/main.py", main)]
    pip = next((Path(ensurepip.__file__).parent / "_bundled").glob("pip-*.whl"))
    shutil.copy(pip, folder / pip.name)
    return _wheel(folder, "benchapp", files, requires)


def _repack(site: Path, info: Path, out: Path) -> None:
    """The wheel an installed distribution came from, rebuilt from its RECORD."""
    lines = (info / "WHEEL").read_text(encoding="utf-8").splitlines()
    tags = [line.split(":", 1)[1].strip().split("-") for line in lines if line.startswith("Tag:")]
    tag = "-".join(".".join(dict.fromkeys(t[i] for t in tags)) for i in range(3))
    name, version = info.name.removesuffix(".dist-info").rsplit("-", 1)
    wheel = out / f"{name}-{version}-{tag}.whl"
    if wheel.exists():
        return
    record = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for row in csv.reader((info / "RECORD").read_text(encoding="utf-8").splitlines()):
            path = row[0]
            skip = path.startswith("..") or "__pycache__" in path
            if skip or path.endswith(("/RECORD", "/INSTALLER", "/REQUESTED")):
                continue
            data = (site / path).read_bytes()
            archive.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{path},sha256={digest.decode()},{len(data)}")
        archive.writestr(f"{info.name}/RECORD", "\n".join([*record, f"{info.name}/RECORD,,"]))


def _black_house(folder: Path) -> Path:
    """A wheelhouse with black's locked set for both platforms, and the wrapper's wheel."""
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    for platform in UV_PLATFORMS:
        site = folder.parent / f"site-{platform}"
        subprocess.run(
            [uv, "pip", "install", "--offline", "--quiet", "--python-platform", platform,
             "--python-version", "3.11", "--target", str(site), BLACK],
            check=True,
        )  # fmt: skip
        folder.mkdir(parents=True, exist_ok=True)
        for info in sorted(site.glob("*.dist-info")):
            _repack(site, info, folder)
    return _app(folder, [BLACK])


def _random_files(total: int) -> Files:
    """Incompressible files, made one at a time so this process stays small."""
    chunk = 8 << 20
    for n in range(total // chunk):
        yield f"benchdep/blob{n:03d}.bin", os.urandom(chunk)


def _written() -> int:
    """Bytes this process and its waited-for children have written to disk so far."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_oublock
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_oublock
    return (own + children) * 512


@contextlib.contextmanager
def _phase(phases: Phases, name: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        phases[name] = phases.get(name, 0.0) + time.perf_counter() - start


def _timing(phases: Phases, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        with _phase(phases, name):
            return function(*args, **kwargs)

    return timed


@contextlib.contextmanager
def _phases_of_builder(phases: Phases) -> Iterator[None]:
    """Time the image builder's steps by wrapping the functions it calls."""
    swaps = [
        (image_builder, "load_base", "base"),
        (image_builder, "resolve_site", "resolve"),
        (image_native, "base_libraries", "libraries"),
        (image_native, "check_native", "check"),
        (image_builder, "write_layers", "layers"),
        (image_builder, "write_images", "write"),
    ]
    saved = [(module, name, getattr(module, name)) for module, name, _ in swaps]
    for module, name, label in swaps:
        setattr(module, name, _timing(phases, label, getattr(module, name)))
    try:
        yield
    finally:
        for module, name, original in saved:
            setattr(module, name, original)


def _shipyard_build(
    app: Path, house: Path, work: Path, phases: Phases | None = None, *, cache: Path | None = None
) -> Path:
    env = {
        **os.environ,
        "UV_OFFLINE": "1",
        "UV_NO_INDEX": "1",
        "UV_FIND_LINKS": str(house),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(house),
        "SHIPYARD_CACHE_DIR": str(cache or work / "cache"),
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
    with _phases_of_builder(phases if phases is not None else {}):
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


def _image_size(layout: Path) -> int:
    """The bytes of every blob the layout's image names (base included), each once."""
    found = read_layout(layout, [Platform.parse(p) for p in PLATFORMS])
    blobs = {x.descriptor.digest: x.descriptor.size for i, _ in found.values() for x in i.layers}
    return sum(blobs.values())


def _docker(*args: str, cwd: Path | None = None) -> None:
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    done = subprocess.run(["docker", *args], cwd=cwd, env=env, capture_output=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"docker {' '.join(args)} failed:\n{done.stderr.decode()[-2000:]}")


def _daemon_written() -> int | None:
    """Bytes dockerd and containerd have written so far (None when unreadable)."""
    total = 0
    for name in ("dockerd", "containerd"):
        found = subprocess.run(["pgrep", "-x", name], capture_output=True, text=True, check=False)
        for pid in found.stdout.split():
            try:
                text = Path(f"/proc/{pid}/io").read_text()
            except OSError:
                return None
            total += int(next(ln for ln in text.splitlines() if ln.startswith("write_bytes:"))[12:])
    return total


def _base_digests() -> dict[str, str]:
    found = read_layout(BASE_LAYOUT, [Platform.parse(p) for p in PLATFORMS])
    return {str(p): digest for p, (_, digest) in found.items()}


def _docker_build_push(house: Path, work: Path, repo: str, phases: Phases) -> None:
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
        with _phase(phases, "build"):
            _docker("build", "--no-cache", "--network", "none", "--platform", platform,
                    "-t", tag, ".", cwd=context)  # fmt: skip
        with _phase(phases, "push"):
            _docker("push", tag)
        tags.append(tag)
    with _phase(phases, "push"):
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


def _child(work: Path) -> None:
    """Build the big image in this process and report its peak RSS (MiB) and time."""
    start = time.perf_counter()
    _shipyard_build(work / "wheels" / "benchapp-1.0-py3-none-any.whl", work / "wheels", work)
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork and exec from the parent.
    status = Path("/proc/self/status").read_text()
    peak = int(next(ln for ln in status.splitlines() if ln.startswith("VmHWM:")).split()[1]) / 1024
    print(json.dumps({"peak_mib": peak, "seconds": time.perf_counter() - start}))


def _phase_line(runs: list[Phases]) -> str:
    """The median of each phase; the builder's steps overlap (platforms run side by side)."""
    keys = list(dict.fromkeys(k for run in runs for k in run))
    parts = [f"{k} {statistics.median(run.get(k, 0.0) for run in runs):.2f}s" for k in keys]
    return "      " + ", ".join(parts)


SIDES = {
    "shipyard": "shipyard, warm cache (the cache folder kept, as on a workstation or a cached CI)",
    "cold": "shipyard, cold cache (a new cache folder: base checked, every layer made)",
    "docker": "docker build (classic, --no-cache) + push + manifest list",
}


def _ours(app: Path, house: Path, work: Path, cache: Path, repo: str) -> tuple[Phases, int, Path]:
    """One shipyard build and push: its phases (`total`, `build` included), the bytes it
    wrote and the layout."""
    phases: Phases = {}
    start, before = time.perf_counter(), _written()
    layout = _shipyard_build(app, house, work, phases, cache=cache)
    wrote = _written() - before
    phases["build"] = time.perf_counter() - start
    with _phase(phases, "push"):
        _push(layout, repo)
    phases["total"] = time.perf_counter() - start
    return phases, wrote, layout


def _versus_docker(root: Path, runs: int) -> dict[str, float]:
    """Each side `runs` times, taking turns; each side's phases and bytes written are
    printed. The medians of each side's total, and of each shipyard side's build alone
    (`<side>-build`)."""
    house = root / "black" / "wheels"
    app = _black_house(house)
    for platform, digest in _base_digests().items():
        _docker("pull", "--platform", platform, f"{BASE_REPO}@{digest}")
    stamp = str(time.time_ns())
    warm = root / "cache"
    _shipyard_build(app, house, root / "warm-up", cache=warm)  # as docker's pull above
    phases: dict[str, list[Phases]] = defaultdict(list)
    written: dict[str, list[int]] = defaultdict(list)
    size = 0
    for n in range(runs):
        for side, cache in (("shipyard", warm), ("cold", root / f"cold{n}" / "cache")):
            ours, wrote, layout = _ours(
                app, house, root / f"{side}{n}", cache, f"bench/{side}-{stamp}-{n}"
            )
            phases[side].append(ours)
            written[side].append(wrote)
            size = _image_size(layout)
        theirs: Phases = {}
        start, daemon = time.perf_counter(), _daemon_written()
        _docker_build_push(house, root / f"docker{n}", f"bench/docker-{stamp}-{n}", theirs)
        theirs["total"] = time.perf_counter() - start
        after = _daemon_written()
        if daemon is not None and after is not None:
            written["docker"].append(after - daemon)
        phases["docker"].append(theirs)
    print(f"two-platform image of {BLACK} ({size / MB:.1f} MB), medians of {runs} runs:")
    for side, title in SIDES.items():
        print(f"  {title}")
        print(_phase_line(phases[side]))
        if written[side]:
            mb = statistics.median(written[side]) / MB
            who = "dockerd+containerd" if side == "docker" else "this process+children"
            print(f"      wrote {mb:.1f} MB per image build ({who}); image {size / MB:.1f} MB")
    medians = {side: statistics.median(p["total"] for p in phases[side]) for side in SIDES}
    for side in ("shipyard", "cold"):
        medians[f"{side}-build"] = statistics.median(p["build"] for p in phases[side])
    return medians


def main() -> None:
    """Run the comparisons and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--big-mb", type=int, default=500, help="random layer bytes")
    parser.add_argument("--skip-big", action="store_true", help="no 500 MB image")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child)
        return
    rows: list[tuple[str, float, float, str, float]] = []
    report: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="shipyard-bench-") as tmp:
        root = Path(tmp)
        times = _versus_docker(root, args.runs)
        docker = times["docker"]
        rows.append(("build+push vs docker, warm cache", times["shipyard"], docker, "<= 0.2x", 0.2))
        rows.append(("build+push vs docker, cold cache", times["cold"], docker, "<= 0.2x", 0.2))
        layout = root / "cold0" / "dist" / "images" / "benchapp"
        bound = statistics.median(_bound(layout, root / f"bound{n}") for n in range(args.runs))
        # Shown, not judged: black's 8 MB of layers are a small part of its cold build
        # (resolve and the base check dominate); the 2x bound is judged on the big image.
        rows.append(
            ("cold build vs tar+gzip+sha256 bound", times["cold-build"], bound, "(shown)", inf)
        )
        if not args.skip_big:
            big = root / "big"
            _wheel(_app(big / "wheels", ["benchdep"]).parent, "benchdep",
                   _random_files(args.big_mb << 20), [])  # fmt: skip
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
    if report:
        peak = report["peak_mib"]
        miss = "" if peak < 200 else "  MISSED"
        label = f"peak RSS, {args.big_mb} MB image"
        print(f"{label:36} {peak:7.0f}MiB {'':>10} {'':>7}  < 200 MiB{miss}")
    print(
        f"(medians of {args.runs} runs, sides taking turns; the {args.big_mb} MB build runs once)"
    )


if __name__ == "__main__":
    main()
