"""The one check of a staged release folder (release/verification.py), and the
registry documents `verify` reads (security issue, second round, items 6, 8, 9, 10).

Each test names the hole it pins; each failed on the code before the fix:
- item 6: a file planted inside a symlinked folder (`zipapps/ -> elsewhere`) passed,
  since `rglob` does not descend into symlinked folders;
- item 9: a signed 1.0 folder copied to `rel/9.9.9` verified; SHA256SUMS with a
  name listed twice, an absolute or a `..` name was read without complaint;
- item 8: an `.att` manifest whose layers are not objects gave an AttributeError;
- item 10: SHA256SUMS.sig was read whole, whatever its size.
The parser agrees with `sha256sum -c` (run here) on every folder it accepts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from shipyard.cli import main
from shipyard.release.keys import (
    SigningKey,
    VerifyError,
    generate_keypair,
    load_public_key,
    sign_sums,
)
from shipyard.release.provenance import verify_image_attestation
from shipyard.release.signing import verify_image_signature
from shipyard.release.staging import sha256sums
from shipyard.release.verification import check_release, parse_sums, verify_release
from tests.reliability import record
from tests.unit.release.test_signing import _release

HEX = "ab" * 32


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, SigningKey, ec.EllipticCurvePublicKey, Path]:
    """A signed staged release of 1.0 in `rel/1.0`, its key, public key and .pub path."""
    key = generate_keypair(tmp_path / "keys" / "k.key", tmp_path / "keys" / "k.pub")
    folder = tmp_path / "rel" / "1.0"
    _release(folder, key)
    return folder, key, load_public_key(tmp_path / "keys" / "k.pub"), tmp_path / "keys" / "k.pub"


def _resign(folder: Path, key: SigningKey) -> None:
    (folder / "SHA256SUMS.sig").unlink()
    (folder / "SHA256SUMS").write_text(sha256sums(folder))
    sign_sums(folder, key)


@pytest.mark.reliability
def test_a_file_planted_through_a_symlinked_folder_is_refused(
    signed: tuple[Path, SigningKey, ec.EllipticCurvePublicKey, Path], tmp_path: Path
) -> None:
    """Item 6: `zipapps/` replaced by a symlink to a folder holding the same zipapp and
    an extra one. rglob did not descend into it, so the extra file passed."""
    folder, _, public, _ = signed
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(folder / "zipapps", elsewhere)
    (elsewhere / "extra.pyz").write_bytes(b"#!planted")
    shutil.rmtree(folder / "zipapps")
    (folder / "zipapps").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(VerifyError, match=r"zipapps is a symlink"):
        verify_release(folder, public)
    record(
        "a file planted through a symlinked folder of a release",
        area="release trust",
        cases=1,
        injected="zipapps/ of a signed release replaced by a symlink to a folder holding the "
        "same zipapp and an extra one",
        result="verify exited 1 naming zipapps as a symlink (before the fix: accepted)",
    )


def test_a_symlinked_file_is_refused_even_with_the_right_digest(
    signed: tuple[Path, SigningKey, ec.EllipticCurvePublicKey, Path], tmp_path: Path
) -> None:
    folder = signed[0]
    wheel = folder / "wheels" / "hello-1.0-py3-none-any.whl"
    moved = tmp_path / "moved.whl"
    shutil.move(wheel, moved)
    wheel.symlink_to(moved)
    with pytest.raises(VerifyError, match=r"hello-1\.0-py3-none-any\.whl is a symlink"):
        check_release(folder)  # integrity only: refused all the same


def test_a_fifo_in_the_folder_is_refused(
    signed: tuple[Path, SigningKey, ec.EllipticCurvePublicKey, Path],
) -> None:
    folder, _, public, _ = signed
    os.mkfifo(folder / "zipapps" / "pipe")
    with pytest.raises(VerifyError, match=r"pipe is not a regular file"):
        verify_release(folder, public)


@pytest.mark.reliability
def test_a_folder_copied_under_another_version_does_not_verify(
    signed: tuple[Path, SigningKey, ec.EllipticCurvePublicKey, Path], tmp_path: Path
) -> None:
    """Item 9: the signed 1.0 folder copied to rel/9.9.9 verified."""
    folder, _, public, pub_path = signed
    assert any("of 1.0 match" in line for line in verify_release(folder, public))
    copy = tmp_path / "rel" / "9.9.9"
    shutil.copytree(folder, copy)
    with pytest.raises(VerifyError, match=r"is the release of 1\.0, not 9\.9\.9"):
        verify_release(copy, public)
    # --version says which: the copy is the 1.0 release, and only that.
    assert verify_release(copy, public, "1.0")
    assert verify_release(copy, public, "1.0.0")  # PEP 440: the same version
    with pytest.raises(VerifyError, match=r"not 2\.0"):
        verify_release(folder, public, "2.0")
    assert main(["verify", str(copy), "--key", str(pub_path)]) == 1
    assert main(["verify", str(copy), "--key", str(pub_path), "--version", "1.0"]) == 0
    assert main(["verify", str(folder), "--key", str(pub_path), "--version", "9.9.9"]) == 1
    record(
        "a signed release folder under another version's name",
        area="release trust",
        cases=3,
        injected="a signed 1.0 folder copied to rel/9.9.9; verify --version 1.0 of the copy; "
        "verify --version 9.9.9 of the original",
        result="the copy and the wrong --version exited 1, --version 1.0 exited 0 "
        "(before the fix: the copy verified)",
    )


def test_the_provenance_must_name_the_version_release_json_names(
    signed: tuple[Path, SigningKey, ec.EllipticCurvePublicKey, Path],
) -> None:
    """release.json rewritten to another version and re-signed by someone holding the
    key but not the provenance's signature: the signed provenance still says 1.0."""
    folder, key, public, _ = signed
    staged = json.loads((folder / "release.json").read_text())
    staged["version"] = "2.0"
    (folder / "release.json").write_text(json.dumps(staged))
    _resign(folder, key)
    with pytest.raises(VerifyError, match=r"the provenance is of version '1\.0', not 2\.0"):
        check_release(folder, public=public, version="2.0")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"{HEX}  a\n{HEX}  a\n", r":2: a is listed twice"),
        (f"{HEX}  /etc/passwd\n", r":1: the name '/etc/passwd'"),
        (f"{HEX}  wheels/../../x\n", r":1: the name 'wheels/\.\./\.\./x'"),
        (f"{HEX}  ./a\n", r":1: the name '\./a'"),
        (f"{HEX} a\n", r":1: not a sha256sum line"),
        (f"{HEX.upper()}  a\n", r":1: not a sha256sum line"),
        (f"{HEX}  a", r"the last line has no newline"),
        (f"{HEX}  a\n\n", r":2: not a sha256sum line"),
        (f"\\{HEX}  a\\nb\n", r":1: not a sha256sum line"),
        (f"{HEX}  a\r\n", r":1: a carriage return"),
        (f"{HEX}  \n", r":1: an empty name"),
    ],
)
def test_sums_lines_that_could_mean_two_things_are_refused(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(VerifyError, match=message):
        parse_sums(text, tmp_path / "SHA256SUMS")


def test_the_parser_agrees_with_sha256sum_c(tmp_path: Path) -> None:
    """What the parser accepts, `sha256sum -c` checks the same way: same files, same
    verdicts (a changed file fails both), the binary marker included."""
    (tmp_path / "d").mkdir()
    for name, data in (("a.txt", b"a"), ("d/b.bin", b"b"), ("sp ace", b"c")):
        (tmp_path / name).write_bytes(data)
    text = sha256sums(tmp_path)
    lines = text.splitlines(keepends=True)
    text = lines[0] + lines[1].replace("  ", " *", 1) + "".join(lines[2:])
    (tmp_path / "SHA256SUMS").write_text(text)
    listed = parse_sums(text, tmp_path / "SHA256SUMS")
    assert sorted(listed) == ["a.txt", "d/b.bin", "sp ace"]

    def coreutils() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["sha256sum", "--strict", "-c", "SHA256SUMS"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
        )

    done = coreutils()
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(line.rpartition(": ")[0] for line in done.stdout.splitlines()) == sorted(listed)
    (tmp_path / "sp ace").write_bytes(b"changed")
    assert coreutils().returncode == 1
    (tmp_path / "release.json").write_text(json.dumps({"version": "1", "artifacts": []}))
    (tmp_path / "SHA256SUMS").write_text(
        text + next(x for x in sha256sums(tmp_path).splitlines(True) if "release.json" in x)
    )
    with pytest.raises(VerifyError, match=r"sp ace has sha256"):
        check_release(tmp_path)


@pytest.mark.reliability
def test_an_oversized_signature_file_is_not_read_whole(
    signed: tuple[Path, SigningKey, ec.EllipticCurvePublicKey, Path],
) -> None:
    """Item 10: SHA256SUMS.sig of 1 MiB (a signature is 100 bytes) is refused by size."""
    folder, _, public, _ = signed
    (folder / "SHA256SUMS.sig").write_bytes(b"A" * (1 << 20))
    with pytest.raises(VerifyError, match=r"SHA256SUMS\.sig is larger than 65536 bytes"):
        verify_release(folder, public)
    record(
        "an oversized SHA256SUMS.sig",
        area="resource bounds",
        cases=1,
        injected="SHA256SUMS.sig of 1 MiB in a signed release folder",
        result="refused by its size (64 KiB cap) without reading it whole",
    )


def test_a_wheel_added_to_release_json_but_not_to_the_sums_is_refused(
    signed: tuple[Path, SigningKey, ec.EllipticCurvePublicKey, Path],
) -> None:
    """Item 1: promote uploaded a wheel release.json listed and SHA256SUMS did not.
    Even with the sums rewritten to cover release.json (integrity-only check, as an
    unsigned release gets), a listed artifact must be in the sums."""
    folder, _, _, _ = signed
    staged = json.loads((folder / "release.json").read_text())
    (folder / "wheels" / "evil-1.0-py3-none-any.whl").write_bytes(b"evil")
    staged["artifacts"].append(
        {"kind": "wheel", "path": "wheels/evil-1.0-py3-none-any.whl", "sha256": "0" * 64}
    )
    (folder / "release.json").write_text(json.dumps(staged))
    # As in the attack: SHA256SUMS left alone, so release.json no longer matches it.
    with pytest.raises(VerifyError, match=r"release\.json has sha256 .*SHA256SUMS says"):
        check_release(folder)
    sums = [
        line
        for line in sha256sums(folder).splitlines(True)
        if not line.endswith("evil-1.0-py3-none-any.whl\n")
    ]
    (folder / "SHA256SUMS").write_text("".join(sums))
    with pytest.raises(VerifyError, match=r"evil-1\.0-py3-none-any\.whl is in the release but not"):
        check_release(folder)
    (folder / "wheels" / "evil-1.0-py3-none-any.whl").unlink()
    with pytest.raises(VerifyError, match=r"evil-1\.0-py3-none-any\.whl is in release\.json but"):
        check_release(folder)


class _Documents:
    """A registry serving fixed manifests and blobs: documents the real registry refuses
    to store (a manifest whose layers are not objects), as a hostile one would serve."""

    host = "127.0.0.9:5000"

    def __init__(self, manifests: dict[str, bytes]) -> None:
        self.manifests = manifests

    def manifest_exists(self, repo: str, reference: str) -> str | None:
        return "sha256:" + "0" * 64 if reference in self.manifests else None

    def get_manifest(self, repo: str, reference: str, accept: Any = ()) -> tuple[bytes, str, str]:
        return self.manifests[reference], "application/vnd.oci.image.manifest.v1+json", ""


DIGEST = "sha256:" + "cd" * 32


@pytest.mark.parametrize(
    "document",
    [
        b'{"layers": ["not an object"]}',
        b'{"layers": [1, 2]}',
        b'{"layers": {"a": 1}}',
        b"[1, 2, 3]",
        b'{"layers": [{"mediaType": "x", "digest": "sha256:00", "size": "big"}]}',
        b'{"layers": [{"mediaType": "x", "digest": 5, "size": 1}]}',
        b'{"layers": [{"mediaType": "x", "digest": "d", "size": 1, "annotations": ["a"]}]}',
        b'{"layers": [{"mediaType": "x", "digest": "d", "size": 1, "annotations": {"a": 1}}]}',
        b"not json",
        b"[" * 100_000 + b"]" * 100_000,
    ],
)
@pytest.mark.parametrize("suffix", ["att", "sig"])
def test_a_malformed_attachment_manifest_is_a_verify_error(document: bytes, suffix: str) -> None:
    """Item 8: `.att` layers that are not objects gave an AttributeError traceback."""
    tag = f"sha256-{DIGEST[7:]}.{suffix}"
    registry: Any = _Documents({tag: document})
    public = ec.generate_private_key(ec.SECP256R1()).public_key()
    check = verify_image_attestation if suffix == "att" else verify_image_signature
    with pytest.raises(VerifyError, match=rf"127\.0\.0\.9:5000/app:{tag}"):
        check(registry, "app", DIGEST, public)


def test_a_signature_layer_with_a_bad_digest_or_size_is_refused_before_any_download() -> None:
    layer = {"mediaType": "application/vnd.dev.cosign.simplesigning.v1+json", "size": 10}
    for bad in ({**layer, "digest": "md5:00"}, {**layer, "digest": DIGEST, "size": -1}):
        tag = f"sha256-{DIGEST[7:]}.sig"
        registry: Any = _Documents({tag: json.dumps({"layers": [bad]}).encode()})
        public = ec.generate_private_key(ec.SECP256R1()).public_key()
        with pytest.raises(VerifyError, match=r"not sha256|not a byte count"):
            verify_image_signature(registry, "app", DIGEST, public)


def test_each_parsed_document_is_read_once(
    signed: tuple[Path, SigningKey, ec.EllipticCurvePublicKey, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review finding 4: release.json (and the provenance, an image's index) was hashed
    from one read and parsed from another, so a file swapped in between passed the
    signed check. Each is now opened once: the bytes hashed are the bytes parsed (an
    image's root blob, known only from release.json, is hashed again when parsed)."""
    folder, _, public, _ = signed
    opened: list[str] = []
    real_open = os.open

    def counting(path: Any, flags: int, *args: Any) -> int:
        opened.append(Path(path).relative_to(folder).as_posix())
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", counting)
    verified = check_release(folder, public=public, version="1.0")
    monkeypatch.undo()
    for rel in ("release.json", "provenance.intoto.jsonl", "images/hello/index.json"):
        assert opened.count(rel) == 1, (rel, opened)
    assert verified.provenance == tuple((folder / "provenance.intoto.jsonl").read_bytes().split())


def test_a_symlink_named_like_another_version_does_not_verify(
    signed: tuple[Path, SigningKey, ec.EllipticCurvePublicKey, Path], tmp_path: Path
) -> None:
    """Review finding 7: `rel2/2.0 -> rel/1.0` verified as the 2.0 release, since the
    version came from the resolved name. A symlinked release folder is refused."""
    folder, _, public, _ = signed
    link = tmp_path / "rel2" / "2.0"
    link.parent.mkdir()
    link.symlink_to(folder, target_is_directory=True)
    with pytest.raises(VerifyError, match=r"2\.0 is a symlink"):
        verify_release(link, public)


def test_a_file_that_vanishes_during_the_check_is_a_verify_error(
    signed: tuple[Path, SigningKey, ec.EllipticCurvePublicKey, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review finding 8: a file removed between the listing and its lstat gave a
    FileNotFoundError traceback."""
    folder, _, public, _ = signed
    real_lstat = os.lstat

    def vanishing(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if str(path).endswith("hello.pyz"):
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", vanishing)
    with pytest.raises(VerifyError, match=r"hello\.pyz cannot be read"):
        check_release(folder, public=public)
