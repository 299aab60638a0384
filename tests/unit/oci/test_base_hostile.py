"""Hostile base image layers, damaged base blobs and image builds on hostile bases.

Layers with escaping names, writes through symlinks, hard links to /etc/passwd
and whiteouts aimed outside are refused from every base source; normal root
file systems (setuid programs, device nodes) are kept byte for byte, and nothing
is unpacked or written outside the blob store.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from shipyard.builders.image import ImageBuilder
from shipyard.engine.run import wrapped
from shipyard.errors import BuildError
from shipyard.oci.archive import write_docker_archive
from shipyard.oci.base import load_base
from shipyard.oci.layer import BlobStore, layer_from_tarball
from shipyard.oci.layout import write_layout
from shipyard.oci.model import (
    Config,
    Descriptor,
    Image,
    Layer,
    OCIError,
    Platform,
    append_layer,
    make_index,
)
from tests.reliability import record
from tests.unit._hostile import (
    EPOCH,
    PAYLOAD,
    HostileInstaller,
    image_action,
    make_case,
    wheel_artifact,
)
from tests.unit.files.test_sources_hostile import snapshot, within


@dataclass(frozen=True)
class Member:
    """One tar entry of a hand-made layer."""

    name: str
    kind: bytes = tarfile.REGTYPE
    data: bytes = b""
    link: str = ""
    mode: int = 0o644


def tar_of(members: Sequence[Member]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for m in members:
            info = tarfile.TarInfo(m.name)
            info.type, info.mode, info.linkname, info.mtime = m.kind, m.mode, m.link, EPOCH
            if m.kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
                info.devmajor, info.devminor = 1, 3
            if m.kind == tarfile.REGTYPE:
                info.size = len(m.data)
                tar.addfile(info, io.BytesIO(m.data))
            else:
                tar.addfile(info)
    return buffer.getvalue()


def _f(name: str, **kw: object) -> Member:
    return Member(name, data=PAYLOAD, **kw)  # type: ignore[arg-type]


SYM, LNK, DIR = tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.DIRTYPE
# name: (members, what the error says)
HOSTILE_LAYERS: dict[str, tuple[list[Member], str]] = {
    "../evil": ([_f("../evil")], "'..'"),
    "./../evil": ([_f("./../evil")], "'..'"),
    "etc/../../evil": ([_f("etc/../../evil")], "'..'"),
    "absolute /etc/evil": ([_f("/etc/evil")], "absolute"),
    "long PAX name with ../": ([_f("a/" * 60 + "../" * 70 + "evil")], "'..'"),
    "symlink to /etc, then a file through it": (
        [Member("etc2", SYM, link="/etc"), _f("etc2/passwd")],
        "through the symlink",
    ),
    "symlink up, then a folder through it": (
        [Member("up", SYM, link="../../.."), Member("up/x", DIR, mode=0o755)],
        "through the symlink",
    ),
    "symlink, then a file over it": (
        [Member("l", SYM, link="/tmp/evil"), _f("l")],
        "through the symlink",
    ),
    "hard link to /etc/passwd": ([Member("pw", LNK, link="/etc/passwd")], "absolute"),
    "hard link to ../../etc/passwd": ([Member("pw", LNK, link="../../etc/passwd")], "'..'"),
    "hard link through a symlink": (
        [Member("e", SYM, link="/etc"), Member("pw", LNK, link="e/passwd")],
        "through the symlink",
    ),
    "whiteout of '..'": ([Member("usr/.wh..."), _f("usr/x")], "whiteout"),
    "whiteout with no name": ([Member("usr/.wh.")], "whiteout"),
    "whiteout ../.wh.etc": ([Member("../.wh.etc")], "'..'"),
    "whiteout through a symlink": (
        [Member("s", SYM, link="/"), Member("s/.wh.etc")],
        "through the symlink",
    ),
}
# Normal in a root file system; kept as they are, never unpacked by shipyard.
KEPT_LAYERS: dict[str, list[Member]] = {
    "setuid and setgid programs": [_f("usr/bin/su", mode=0o4755), _f("usr/bin/wall", mode=0o2755)],
    "device nodes and a fifo": [
        Member("dev/null", tarfile.CHRTYPE, mode=0o666),
        Member("dev/loop0", tarfile.BLKTYPE, mode=0o660),
        Member("run/initctl", tarfile.FIFOTYPE, mode=0o600),
    ],
    "absolute symlinks and a hard link inside": [
        Member("./usr/bin/python3", SYM, link="/usr/bin/python3.11"),
        _f("./usr/bin/perl"),
        Member("./usr/bin/perl5", LNK, link="./usr/bin/perl"),
        Member("./.wh..wh..opq"),
        Member("usr/share/.wh.doc"),
    ],
}
SOURCES = ("rootfs tar", "rootfs tar.gz", "docker-archive", "oci-layout")


def _base_from(kind: str, layer_tar: bytes, folder: Path) -> str:
    """Write a base of `kind` with one layer; the base text for load_base (root: `folder`)."""
    if kind == "rootfs tar":
        (folder / "rootfs.tar").write_bytes(layer_tar)
        return "rootfs:rootfs.tar;linux/amd64"
    if kind == "rootfs tar.gz":
        (folder / "rootfs.tar.gz").write_bytes(gzip.compress(layer_tar, mtime=0))
        return "rootfs:rootfs.tar.gz;linux/amd64"
    store = BlobStore(folder / "maker-store")
    layer = layer_from_tarball(io.BytesIO(layer_tar), store)
    image = append_layer(Image(Platform("linux", "amd64"), config=Config()), layer)
    if kind == "docker-archive":
        write_docker_archive(folder / "base.tar", image, ["base:1"], EPOCH)
        return "docker-archive:base.tar"
    write_layout(folder / "base", make_index([image]), ref="1")
    return "oci-layout:base"


def _tree_state(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.mark.reliability
def test_hostile_base_layers_are_refused_from_every_source(tmp_path: Path) -> None:
    problems: list[str] = []
    refused = kept = 0
    for kind in SOURCES:
        for name, (members, says) in HOSTILE_LAYERS.items():
            folder = tmp_path / f"{kind}-{refused + kept}"
            (folder / "outside").mkdir(parents=True)
            text = _base_from(kind, tar_of(members), folder)
            store = BlobStore(folder / "store")
            got = within(30, partial(load_base, text, ["linux/amd64"], root=folder, store=store))
            if isinstance(got, OCIError) and says in str(got):
                refused += 1
            else:
                problems.append(
                    f"{kind}: {name}: expected an OCIError saying {says!r}, got {got!r}"
                )
            if snapshot(folder / "outside") or (folder / "evil").exists():
                problems.append(f"{kind}: {name}: something was written outside")
        for name, members in KEPT_LAYERS.items():
            folder = tmp_path / f"{kind}-kept-{kept + refused}"
            (folder / "outside").mkdir(parents=True)
            data = tar_of(members)
            text = _base_from(kind, data, folder)
            before = _tree_state(folder)
            try:
                bases = load_base(
                    text, ["linux/amd64"], root=folder, store=BlobStore(folder / "store")
                )
            except OCIError as exc:
                problems.append(f"{kind}: {name}: refused a normal root file system: {exc}")
                continue
            kept += 1
            (layer,) = bases["linux/amd64"].image.layers
            if gzip.decompress(layer.path.read_bytes()) != data:
                problems.append(f"{kind}: {name}: the base layer's tar was changed")
            created = {p for p in _tree_state(folder) - before if not p.startswith("store")}
            if created or snapshot(folder / "outside"):
                problems.append(f"{kind}: {name}: files appeared outside the store: {created}")
    cases = refused + kept
    record(
        "hostile base image layers",
        area="archives",
        cases=len(SOURCES) * (len(HOSTILE_LAYERS) + len(KEPT_LAYERS)),
        injected=f"{len(HOSTILE_LAYERS)} hostile layers (../ and absolute names, a long PAX "
        "name, symlinks out with files and folders written through or over them, hard links "
        "to /etc/passwd and through symlinks, whiteouts of '..', empty and through links) "
        f"and {len(KEPT_LAYERS)} normal ones with setuid programs, device nodes, a fifo and "
        f"absolute symlinks, each as {len(SOURCES)} base sources ({', '.join(SOURCES)})",
        result=f"{refused} hostile bases refused naming the entry, {kept} normal ones kept "
        "byte for byte; nothing unpacked, nothing written outside the blob store",
        figures={"cases": cases, "refused": refused, "kept": kept},
    )
    assert not problems, "\n".join(problems)


@pytest.mark.reliability
def test_damaged_base_blobs_and_docker_archives_are_refused(tmp_path: Path) -> None:
    problems: list[str] = []
    good = tar_of([_f("etc/os-release")])
    checks: list[tuple[str, Callable[[Path], str], str]] = []

    def tampered(folder: Path) -> str:
        text = _base_from("oci-layout", good, folder)
        (blob,) = [p for p in (folder / "base" / "blobs" / "sha256").iterdir() if _is_gzip(p)]
        data = gzip.compress(tar_of([_f("etc/os-releasX")]), mtime=0)
        blob.chmod(0o644)
        blob.write_bytes(data[: blob.stat().st_size].ljust(blob.stat().st_size, b"\0"))
        return text

    def linked_to_a_host_file(folder: Path) -> str:
        text = _base_from("oci-layout", good, folder)
        (blob,) = [p for p in (folder / "base" / "blobs" / "sha256").iterdir() if _is_gzip(p)]
        host = folder / "outside" / "host-file"
        host.write_bytes(b"h" * blob.stat().st_size)  # same size: only the digest tells
        blob.unlink()
        blob.symlink_to(host)
        return text

    def zstd(folder: Path) -> str:
        blob = folder / "layer.zst"
        blob.write_bytes(b"\x28\xb5\x2f\xfd".ljust(64, b"\0"))
        digest = "sha256:" + hashlib.sha256(blob.read_bytes()).hexdigest()
        kind = "application/vnd.oci.image.layer.v1.tar+zstd"
        layer = Layer(Descriptor(kind, digest, 64), "sha256:" + "0" * 64, blob)
        image = append_layer(Image(Platform("linux", "amd64"), config=Config()), layer)
        write_layout(folder / "base", make_index([image]), ref="1")
        return "oci-layout:base"

    checks += [
        ("a layout blob changed after writing", tampered, "digest"),
        ("a layout blob linked to a host file", linked_to_a_host_file, "digest"),
        ("a zstd layer", zstd, "zstd"),
    ]
    for member in ("../../etc/passwd", "/etc/passwd", "blobs/../../../../etc/passwd"):
        for key in ("Layers", "Config"):
            checks.append(
                (
                    f"docker-archive {key} naming {member}",
                    _archive_naming(key, member),
                    "docker-archive",
                )
            )
    checks += [
        (
            "docker-archive layer that is a symlink to /etc/passwd",
            _archive_link(SYM),
            "docker-archive",
        ),
        (
            "docker-archive layer that is a hard link to /etc/passwd",
            _archive_link(LNK),
            "docker-archive",
        ),
    ]
    passwd = Path("/etc/passwd").read_bytes()
    for number, (name, make, says) in enumerate(checks):
        folder = tmp_path / str(number)
        (folder / "outside").mkdir(parents=True)
        text = make(folder)
        store = BlobStore(folder / "store")
        got = within(30, partial(load_base, text, ["linux/amd64"], root=folder, store=store))
        if not isinstance(got, OCIError) or says not in str(got):
            problems.append(f"{name}: expected an OCIError saying {says!r}, got {got!r}")
        stored = [p for p in store.root.rglob("*") if p.is_file()] if store.root.exists() else []
        if any(passwd in _inflated(p) for p in stored):
            problems.append(f"{name}: /etc/passwd was copied into the blob store")
    record(
        "damaged base blobs and docker-archives",
        area="archives",
        cases=len(checks),
        injected="a layout layer blob altered or replaced by a link to a same-size host "
        "file, a zstd layer, docker-archives whose manifest names ../, absolute and "
        "blobs/../ paths, and whose layer member is a symlink or hard link to /etc/passwd",
        result=f"{len(checks) - len(problems)}/{len(checks)} refused with an OCIError; "
        "no host file read into the blob store",
        figures={"cases": len(checks), "failures": len(problems)},
    )
    assert not problems, "\n".join(problems)


def _is_gzip(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:2] == b"\x1f\x8b"


def _inflated(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _archive(folder: Path, manifest: bytes, members: Sequence[Member]) -> str:
    with tarfile.open(folder / "base.tar", "w") as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
        for m in members:
            info = tarfile.TarInfo(m.name)
            info.type, info.linkname = m.kind, m.link
            info.size = len(m.data) if m.kind == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(m.data))
    return "docker-archive:base.tar"


def _archive_naming(key: str, member: str) -> Callable[[Path], str]:
    def make(folder: Path) -> str:
        config = (
            b'{"os":"linux","architecture":"amd64","rootfs":{"diff_ids":["sha256:'
            + b"0" * 64
            + b'"]}}'
        )
        entry: dict[str, object] = {"Config": "config.json", "Layers": ["layer.tar"]}
        entry[key] = member if key == "Config" else [member]
        manifest = ("[" + _json(entry) + "]").encode()
        return _archive(
            folder,
            manifest,
            [Member("config.json", data=config), Member("layer.tar", data=tar_of([]))],
        )

    return make


def _archive_link(kind: bytes) -> Callable[[Path], str]:
    def make(folder: Path) -> str:
        config = (
            b'{"os":"linux","architecture":"amd64","rootfs":{"diff_ids":["sha256:'
            + b"0" * 64
            + b'"]}}'
        )
        manifest = b'[{"Config":"config.json","Layers":["layer.tar"]}]'
        members = [
            Member("config.json", data=config),
            Member("layer.tar", kind, link="/etc/passwd"),
        ]
        return _archive(folder, manifest, members)

    return make


def _json(value: object) -> str:
    return json.dumps(value)


@pytest.mark.reliability
def test_an_image_build_on_a_hostile_base_fails_cleanly(tmp_path: Path) -> None:
    problems: list[str] = []
    for number, (name, (members, says)) in enumerate(list(HOSTILE_LAYERS.items())[:5]):
        case = make_case(tmp_path / str(number), name, [], pip=False)
        shutil.rmtree(case.repo / "base")
        _base_from("oci-layout", tar_of(members), case.repo)
        with pytest.raises(BuildError) as caught:
            wrapped(ImageBuilder(HostileInstaller(lambda s, o: None, case.outside))).run(
                image_action(case), case.ctx(), (wheel_artifact(case.wheel),)
            )
        if says not in str(caught.value) or "base image oci-layout:base" not in str(caught.value):
            problems.append(f"{name}: {caught.value}")
        if (case.repo / "dist" / "images" / "evil").exists():
            problems.append(f"{name}: an image was written")
    record(
        "image builds on hostile bases",
        area="archives",
        cases=5,
        injected="the image builder given an OCI layout base whose layer escapes its root",
        result=f"{5 - len(problems)}/5 failed with one BuildError naming the base and "
        "the entry; no image written",
        figures={"cases": 5, "failures": len(problems)},
    )
    assert not problems, "\n".join(problems)
