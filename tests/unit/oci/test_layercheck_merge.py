"""Base layers are checked as the tree they merge into, not one by one (issue 12, item 5).

A symlink one layer makes and a file a later layer writes through it escape the
root an unpacker gives the image, though each layer alone is harmless. The base
check follows the merged tree across layers, whiteouts (plain and opaque) and
replacing entries included, and refuses such a base with exit 2, naming the
layer and the path; bases whose later layers remove or replace the link first
are kept.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from shipyard.errors import UsageError
from shipyard.oci.base import load_base
from shipyard.oci.layer import BlobStore, layer_from_tarball
from shipyard.oci.layout import write_layout
from shipyard.oci.model import Config, Image, OCIError, Platform, append_layer, make_index
from tests.reliability import record

EPOCH = 1704067200
SYM, LNK, DIR, REG = tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.DIRTYPE, tarfile.REGTYPE


@dataclass(frozen=True)
class M:
    """One tar entry of a hand-made layer."""

    name: str
    kind: bytes = REG
    link: str = ""


def _tar(members: Sequence[M]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for m in members:
            info = tarfile.TarInfo(m.name)
            info.type, info.linkname, info.mtime = m.kind, m.link, EPOCH
            info.mode = 0o755 if m.kind == DIR else 0o644
            data = b"payload\n" if m.kind == REG else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _layout(folder: Path, layers: Sequence[Sequence[M]]) -> tuple[str, list[str]]:
    """An OCI layout `folder/base` of one image with `layers`; its base text and digests."""
    store = BlobStore(folder / "maker-store")
    image = Image(Platform("linux", "amd64"), config=Config())
    digests = []
    for members in layers:
        layer = layer_from_tarball(io.BytesIO(_tar(members)), store)
        image = append_layer(image, layer)
        digests.append(layer.descriptor.digest)
    write_layout(folder / "base", make_index([image]), ref="1")
    return "oci-layout:base", digests


def _load(folder: Path, layers: Sequence[Sequence[M]]) -> tuple[Exception | None, list[str]]:
    folder.mkdir(parents=True, exist_ok=True)
    text, digests = _layout(folder, layers)
    try:
        load_base(text, ["linux/amd64"], root=folder, store=BlobStore(folder / "store"))
    except OCIError as exc:
        return exc, digests
    return None, digests


# name: (layers, the layer (1-based) and entry the error names, the link it names)
REFUSED: dict[str, tuple[list[list[M]], int, str, str]] = {
    "symlink in layer 1, a file through it in layer 2": (
        [[M("evil", SYM, "/etc")], [M("evil/passwd")]],
        2,
        "evil/passwd",
        "evil",
    ),
    "symlink to a folder, then a nested folder and file through it": (
        [[M("usr", DIR), M("usr/lib", SYM, "../../../tmp")], [M("usr/lib/sub/", DIR)]],
        2,
        "usr/lib/sub",
        "usr/lib",
    ),
    "symlink in layer 1, a hard link through it in layer 2": (
        [[M("e", SYM, "/etc")], [M("pw", LNK, "e/shadow")]],
        2,
        "pw",
        "e",
    ),
    "symlink in layer 1, a whiteout through it in layer 2": (
        [[M("root", SYM, "/")], [M("root/etc/.wh.passwd")]],
        2,
        "root/etc/.wh.passwd",
        "root",
    ),
    "symlink in layer 1, a file through it in layer 3": (
        [[M("a", DIR), M("a/l", SYM, "/")], [M("unrelated")], [M("a/l/etc/cron.d/x")]],
        3,
        "a/l/etc/cron.d/x",
        "a/l",
    ),
    "whiteout of the link after the write through it": (
        [[M("e", SYM, "/etc")], [M("e/passwd"), M(".wh.e")]],
        2,
        "e/passwd",
        "e",
    ),
    "whiteout of another name does not remove the link": (
        [[M("e", SYM, "/etc")], [M(".wh.f"), M("e/passwd")]],
        2,
        "e/passwd",
        "e",
    ),
    "opaque whiteout keeps the links of its own layer": (
        [[M("d", DIR)], [M("d/l", SYM, "/"), M("d/.wh..wh..opq"), M("d/l/x")]],
        2,
        "d/l/x",
        "d/l",
    ),
    "hard link to a symlink of layer 1, a file through it in layer 2": (
        [[M("s", SYM, "/etc")], [M("h", LNK, "s"), M("h/passwd")]],
        2,
        "h/passwd",
        "h",
    ),
    "hard link to a symlink in layer 1, a file through it in layer 2": (
        [[M("s", SYM, "/etc"), M("h", LNK, "s")], [M("h/passwd")]],
        2,
        "h/passwd",
        "h",
    ),
    "hard link to a symlink, a file through it, all in one layer": (
        [[M("s", SYM, "/etc"), M("h", LNK, "s"), M("h/passwd")]],
        1,
        "h/passwd",
        "h",
    ),
    "a file over the folder holding a link leaves the link (GNU tar goes on)": (
        [[M("d", DIR), M("d/l", SYM, "/")], [M("d")], [M("d/l/x")]],
        3,
        "d/l/x",
        "d/l",
    ),
    "link replaced by a link, a file through the new one": (
        [[M("l", SYM, "usr")], [M("l", SYM, "/etc")], [M("l/passwd")]],
        3,
        "l/passwd",
        "l",
    ),
}

# Later layers that remove or replace the link first: what Docker writes.
ACCEPTED: dict[str, list[list[M]]] = {
    "symlink removed by a whiteout, then a folder and file at its path": [
        [M("e", SYM, "/etc")],
        [M(".wh.e"), M("e", DIR), M("e/passwd")],
    ],
    "symlink removed by a whiteout, then a file at its path": [
        [M("e", SYM, "/etc")],
        [M(".wh.e"), M("e/passwd")],
    ],
    "opaque whiteout of the folder holding the link, then files below": [
        [M("d", DIR), M("d/l", SYM, "/etc")],
        [M("d", DIR), M("d/.wh..wh..opq"), M("d/l", DIR), M("d/l/x")],
    ],
    "opaque whiteout at the root": [
        [M("l", SYM, "/")],
        [M(".wh..wh..opq"), M("l/etc/x")],
    ],
    "whiteout of the parent folder of a link": [
        [M("d", DIR), M("d/l", SYM, "/")],
        [M(".wh.d")],
        [M("d", DIR), M("d/l", DIR), M("d/l/x")],
    ],
    "link replaced by a folder (as docker diffs write it)": [
        [M("var", DIR), M("var/run", SYM, "/run")],
        [M("var/run", DIR), M("var/run/.wh..wh..opq"), M("var/run/pid")],
    ],
    "link replaced by a file, then by a link again (update-alternatives)": [
        [M("etc/alternatives", DIR), M("etc/alternatives/awk", SYM, "/usr/bin/mawk")],
        [M("etc/alternatives/awk")],
        [M("etc/alternatives/awk", SYM, "/usr/bin/gawk")],
    ],
    "merged /usr: files under the real folders, links left alone": [
        [M("usr/bin", DIR), M("bin", SYM, "usr/bin"), M("lib", SYM, "usr/lib")],
        [M("usr/bin/python3"), M("usr/lib/python3", DIR), M("bin", SYM, "usr/bin")],
    ],
    "hard link to a file through no link": [
        [M("usr/bin", DIR), M("usr/bin/perl")],
        [M("usr/bin/perl5", LNK, "usr/bin/perl")],
    ],
    "hard link whose target is itself a link (link(2) does not follow it)": [
        [M("s", SYM, "/etc")],
        [M("h", LNK, "s")],
    ],
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_write_through_an_earlier_layers_link_is_refused(tmp_path: Path, name: str) -> None:
    layers, index, entry, link = REFUSED[name]
    got, digests = _load(tmp_path, layers)
    assert isinstance(got, UsageError), f"{name}: accepted or wrong error: {got!r}"
    message = str(got)
    assert "base image oci-layout:base" in message
    assert f"entry '{entry}" in message and f"through the symlink '{link}'" in message
    assert digests[index - 1] in message, message
    if len(layers) > 1:
        assert f"base layer {index} of {len(layers)}" in message, message


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_a_link_removed_or_replaced_first_is_kept(tmp_path: Path, name: str) -> None:
    got, _ = _load(tmp_path, ACCEPTED[name])
    assert got is None, f"{name}: refused: {got}"


def test_a_checked_layer_does_not_vouch_for_an_image_built_on_it(tmp_path: Path) -> None:
    """The first layer alone passes and is noted; the image of both is still refused."""
    store = BlobStore(tmp_path / "store")
    first, second = [M("evil", SYM, "/etc")], [M("evil/passwd")]
    (tmp_path / "one").mkdir()
    text, _ = _layout(tmp_path / "one", [first])
    load_base(text, ["linux/amd64"], root=tmp_path / "one", store=store)
    load_base(text, ["linux/amd64"], root=tmp_path / "one", store=store)  # noted: no re-read
    (tmp_path / "two").mkdir()
    text, _ = _layout(tmp_path / "two", [first, second])
    for _ in range(2):  # a refusal is never noted as checked
        with pytest.raises(UsageError, match="through the symlink 'evil'"):
            load_base(text, ["linux/amd64"], root=tmp_path / "two", store=store)


MANIFEST = """\
schema: 1
project: {name: demo, version: "1.0.0", python: "3.11"}
binaries:
  app:
    source: app
    entrypoint: "app:main"
    outputs: [wheel, image]
    platforms: [linux/amd64]
    image: {base: "oci-layout:base"}
"""


def _cli_repo(folder: Path, layers: Sequence[Sequence[M]]) -> list[str]:
    (folder / "app" / "app").mkdir(parents=True)
    (folder / "app" / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        '[project]\nname = "app"\nversion = "1.0.0"\n'
    )
    (folder / "app" / "app" / "__init__.py").write_text("def main() -> None:\n    pass\n")
    (folder / "binaries.yaml").write_text(MANIFEST)
    (folder / ".gitignore").write_text("/dist/\n")
    _, digests = _layout(folder, layers)
    git = ["git", "-C", str(folder), "-c", "user.email=t@t.invalid", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    return digests


def _build(folder: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shipyard", "build", f"--cache-dir={cache}"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CI": "1", "SHIPYARD_CACHE_DIR": str(cache)},
        check=False,
    )


@pytest.mark.reliability
def test_shipyard_build_on_a_base_whose_layers_merge_into_an_escape_exits_2(
    tmp_path: Path,
) -> None:
    """End to end: the CLI refuses the base with exit 2, one message, no image written."""
    problems: list[str] = []
    cli_ok = 0
    trials = [
        "symlink in layer 1, a file through it in layer 2",
        "symlink in layer 1, a hard link through it in layer 2",
        "hard link to a symlink of layer 1, a file through it in layer 2",
    ][: int(os.environ.get("SHIPYARD_BASE_MERGE_CLI_CASES", "1"))]
    for number, name in enumerate(trials):
        before = len(problems)
        layers, index, entry, _ = REFUSED[name]
        folder = tmp_path / str(number)
        digests = _cli_repo(folder, layers)
        done = _build(folder, tmp_path / f"cache-{number}")
        err = done.stderr
        if done.returncode != 2:
            problems.append(f"{name}: exit {done.returncode}, expected 2: {err[-800:]}")
        if "Traceback" in err:
            problems.append(f"{name}: a traceback: {err[-800:]}")
        wanted = (f"base layer {index} of {len(layers)}", digests[index - 1], f"'{entry}'")
        if not all(part in err for part in wanted):
            problems.append(f"{name}: the message does not name {wanted}: {err[-800:]}")
        if (folder / "dist" / "images").exists():
            problems.append(f"{name}: an image was written")
        cli_ok += len(problems) == before
    # The library, every hand-made case: refused or kept as it should be.
    refused = kept = 0
    for number, (name, (layers, _, entry, _)) in enumerate(REFUSED.items()):
        got, _ = _load(tmp_path / f"r{number}", layers)
        if isinstance(got, UsageError) and entry in str(got):
            refused += 1
        else:
            problems.append(f"{name}: not refused: {got!r}")
    for number, (name, layers) in enumerate(ACCEPTED.items()):
        got, _ = _load(tmp_path / f"a{number}", layers)
        if got is None:
            kept += 1
        else:
            problems.append(f"{name}: refused: {got}")
    record(
        "writes through a link an earlier base layer made",
        area="base layers",
        cases=len(REFUSED) + len(ACCEPTED) + len(trials),
        injected=f"{len(REFUSED)} OCI layout bases whose layers are harmless one by one but "
        "merge into a write through a symlink (file, folder, hard link, whiteout; after "
        "unrelated and late whiteouts, an opaque whiteout of the same layer, hard links to "
        f"links), {len(ACCEPTED)} bases whose later layers remove or replace the link first "
        f"(whiteouts, opaque whiteouts, replacing entries), and {len(trials)} "
        "`shipyard build` run(s) on a hostile two-layer base",
        result=f"{refused}/{len(REFUSED)} refused naming the layer, its digest and the entry "
        f"(exit 2), {kept}/{len(ACCEPTED)} kept; {cli_ok}/{len(trials)} CLI run(s) exited 2 "
        "with one message, no traceback, no image; 0 escapes accepted",
        figures={
            "hostile": len(REFUSED),
            "refused": refused,
            "kept": kept,
            "cli_runs": len(trials),
            "cli_exit_2": cli_ok,
            "failures": len(problems),
        },
    )
    assert not problems, "\n".join(problems)


def test_layer_digests_in_messages_are_the_blobs(tmp_path: Path) -> None:
    """The digest a message names is the layer blob's, so a user can find it."""
    got, digests = _load(tmp_path, REFUSED["symlink in layer 1, a file through it in layer 2"][0])
    blob = tmp_path / "base" / "blobs" / "sha256" / digests[1].split(":")[1]
    assert "sha256:" + hashlib.sha256(blob.read_bytes()).hexdigest() == digests[1]
    assert digests[1] in str(got) and digests[0] in str(got)


@pytest.mark.parametrize("junk", [b"J" * 512, b"\0" * 1024 + b"x" * 512], ids=["bad", "after-end"])
def test_an_entry_hidden_after_a_block_tarfile_stops_at_is_still_checked(
    tmp_path: Path, junk: bytes
) -> None:
    """Regression (review of issue 12, item 5): tarfile's stream reader ended a layer
    at the first block that is no valid header (or at the end blocks), while GNU tar
    skips it and unpacks what follows; an entry written through an earlier layer's
    link after such a block was never checked. The layer blob keeps its digest."""
    first = _tar([M("escape", SYM, "/etc")])
    head = _tar([M("ok.txt")]).rstrip(b"\0")
    head += b"\0" * (-len(head) % 512)
    second = head + junk + _tar([M("escape/passwd")])
    store = BlobStore(tmp_path / "maker-store")
    image = Image(Platform("linux", "amd64"), config=Config())
    for raw in (first, second):
        image = append_layer(image, layer_from_tarball(io.BytesIO(raw), store))
    write_layout(tmp_path / "base", make_index([image]), ref="1")
    with pytest.raises(UsageError, match="escape/passwd"):
        load_base(
            "oci-layout:base", ["linux/amd64"], root=tmp_path, store=BlobStore(tmp_path / "s")
        )
