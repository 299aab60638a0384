"""The one check of a staged release folder, run by `shipyard verify`, publish and promote.

A release folder (dist/release/<version>/, staged here or copied from elsewhere) is
trusted only as far as this check goes, and every command that reads one runs it
first, on the same bytes it then uses:

1. the folder holds regular files and folders only: a symlink anywhere (to a file
   or a folder) or a special file is refused, so nothing outside the folder can be
   listed, hashed or published through it;
2. SHA256SUMS parses as `sha256sum -c` reads it, strictly: one `<64 hex>  <name>`
   (or ` *<name>`) per line, names relative, without `..`, each listed once;
3. with a public key, SHA256SUMS.sig verifies SHA256SUMS (a signed release must
   be checked with one; `require_signed` refuses an unsigned folder);
4. every listed file is there with its digest, and every file is listed (only the
   sums, their signature and the publish journal are not);
5. release.json is listed, names the version asked for, and every artifact it names
   is listed with the same digest; an image's layout index names its digest and its
   platform manifests; an SBOM describes an artifact the release lists;
6. with a public key, the provenance (required in a signed release) verifies, its
   subjects are exactly release.json's artifacts and its version is the release's.

Without a key the check is one of integrity, not of origin: whoever can rewrite the
folder can rewrite SHA256SUMS too. Signed releases get origin as well.

Files are read without following symlinks and with a size cap per kind of document,
so a hostile folder cannot make a check read outside it or exhaust memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from shipyard.release.keys import SUMS_LIMIT, VerifyError, read_capped, verify_sums
from shipyard.release.provenance import (
    SLSA_PREDICATE,
    expected_subjects,
    subject_set,
    verify_envelope,
)
from shipyard.release.staged import (
    JOURNAL,
    PROVENANCE_FILE,
    RELEASE_JSON,
    SUMS,
    SUMS_SIG,
    StagedImage,
    StagedRelease,
    covering,
    parse_release,
    path_problem,
)
from shipyard.release.staged import UNSUMMED as _UNSUMMED

__all__ = [
    "JOURNAL",
    "VerifiedRelease",
    "check_release",
    "parse_sums",
    "read_capped",
    "verify_release",
]

# Size cap of release.json, the provenance, an image's index: far above any real
# release's, far below what hurts.
DOCUMENT_LIMIT = 64 << 20  # release.json, provenance, an image's index
_HEX = frozenset("0123456789abcdef")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


@dataclass(frozen=True)
class VerifiedRelease:
    """A staged release folder that passed `check_release`, and what was checked."""

    folder: Path
    version: str
    staged: StagedRelease  # release.json, as the checked bytes hold it, with the files
    # that cover it (the sums, their signature, the provenance) appended
    signed: bool  # SHA256SUMS.sig present (and, with a key, verified)
    checks: tuple[str, ...]  # one line per check, for `verify`'s output
    # The provenance envelopes, one per line, as the checked bytes hold them: what
    # publish and promote attach (never read again from the folder).
    provenance: tuple[bytes, ...] = ()


def _open(path: Path) -> int:
    """A descriptor of the regular file `path`, never through a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise VerifyError(f"{path} is missing") from None
    except OSError as exc:  # ELOOP: a symlink swapped in since the walk
        raise VerifyError(
            f"{path} cannot be read ({exc.strerror}); a release holds files"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise VerifyError(f"{path} is not a regular file")
    return fd


def _sha256(path: Path) -> str:
    fd = _open(path)
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as exc:
        raise VerifyError(f"{path} cannot be read ({exc.strerror})") from None
    return digest.hexdigest()


class _Documents:
    """The documents the check parses, each read once: its bytes are hashed against
    SHA256SUMS and those very bytes parsed, so a file swapped between the hash and
    the parse cannot slip through."""

    def __init__(self, folder: Path, listed: Mapping[str, str]) -> None:
        self.folder = folder
        self.listed = listed
        self._read: dict[str, bytes] = {}

    def bytes(self, rel: str) -> bytes:
        """The bytes of the listed file `rel`, checked against its digest."""
        if rel not in self._read:
            if rel not in self.listed:
                raise VerifyError(f"{self.folder / rel} is not listed in {SUMS}")
            data = read_capped(self.folder / rel, DOCUMENT_LIMIT)
            found = hashlib.sha256(data).hexdigest()
            if found != self.listed[rel]:
                raise VerifyError(
                    f"{self.folder / rel} has sha256 {found}, {SUMS} says {self.listed[rel]}"
                )
            self._read[rel] = data
        return self._read[rel]

    def json(self, rel: str) -> Any:
        """The listed file `rel` parsed as JSON (VerifyError when it is not)."""
        return _load_json(self.bytes(rel), self.folder / rel)


def _files(folder: Path) -> set[str]:
    """Every file under `folder` as a relative POSIX path; VerifyError for a symlink or
    a special file anywhere (a symlinked folder is refused, not skipped)."""
    if folder.is_symlink():
        raise VerifyError(
            f"{folder} is a symlink; give the release folder itself (its name is the version "
            "it must hold)"
        )
    if not folder.is_dir():
        raise VerifyError(f"{folder} is not a release folder (no such directory)")
    found: set[str] = set()

    def refuse(error: OSError) -> None:
        raise VerifyError(f"{error.filename}: cannot list the folder ({error.strerror})")

    for top, folders, names in os.walk(folder, onerror=refuse, followlinks=False):
        for name in sorted([*folders, *names]):
            path = Path(top, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError as exc:  # gone since the listing
                raise VerifyError(f"{path} cannot be read ({exc.strerror})") from None
            if stat.S_ISLNK(mode):
                raise VerifyError(
                    f"{path} is a symlink; a release folder holds regular files only. "
                    "Stage the release again, or copy it without links (cp -rL)"
                )
            if stat.S_ISREG(mode):
                found.add(path.relative_to(folder).as_posix())
            elif not stat.S_ISDIR(mode):
                raise VerifyError(f"{path} is not a regular file; a release holds files only")
    return found


def parse_sums(text: str, where: Path) -> dict[str, str]:
    """SHA256SUMS as `sha256sum -c` reads it: relative name -> lowercase hex digest.

    Stricter than sha256sum: every line must be well formed (no blank or escaped
    lines, no CR), and a name listed twice, absolute or with `..` is refused.
    """
    listed: dict[str, str] = {}
    if text and not text.endswith("\n"):
        raise VerifyError(f"{where}: the last line has no newline; not a sha256sum file")
    for number, line in enumerate(text.split("\n")[:-1] if text else [], 1):
        digest, name = line[:64], line[66:]
        marker = line[64:66]
        if len(digest) != 64 or not set(digest) <= _HEX or marker not in ("  ", " *"):
            raise VerifyError(f"{where}:{number}: not a sha256sum line (<64 hex>  <name>)")
        problem = path_problem(name) or ("\r" in name and "a carriage return") or None
        if problem:
            raise VerifyError(f"{where}:{number}: {problem}")
        if name in listed:
            raise VerifyError(f"{where}:{number}: {name} is listed twice")
        listed[name] = digest
    return listed


def _staged_file(folder: Path, rel: object, what: str) -> str:
    """The relative path release.json gives `what`, checked to stay inside the folder."""
    if not isinstance(rel, str) or path_problem(rel):
        raise VerifyError(f"{folder / RELEASE_JSON}: {what} has the path {rel!r}, not in it")
    return PurePosixPath(rel).as_posix()


def _load_json(data: bytes, where: Path) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise VerifyError(f"{where} is not JSON") from None


def _check_image(docs: _Documents, art: StagedImage, rel: str) -> None:
    """The layout `rel` names release.json's digest, and its index the listed manifests."""
    folder, listed = docs.folder, docs.listed
    digest = art.digest
    if not digest.startswith("sha256:"):
        raise VerifyError(f"{folder / RELEASE_JSON}: the image at {rel} has no sha256 digest")
    index = f"{rel}/index.json"
    if index not in listed:
        raise VerifyError(f"{folder / index} is not listed in {SUMS}")
    tops = docs.json(index)
    tops = tops.get("manifests") if isinstance(tops, dict) else None
    found = [t.get("digest") for t in tops if isinstance(t, dict)] if isinstance(tops, list) else []
    if found != [digest]:
        raise VerifyError(
            f"{folder / index} names {', '.join(map(str, found)) or 'nothing'}, "
            f"release.json says {digest}"
        )
    # Every blob of the layout is listed under its own digest: content-addressed.
    prefix = f"{rel}/blobs/sha256/"
    for name, hexdigest in listed.items():
        blob = name[len(prefix) :] if name.startswith(prefix) else "/"
        if "/" not in blob and blob != hexdigest:
            raise VerifyError(f"{folder / name} is listed with sha256 {hexdigest}")
    root = prefix + digest.partition(":")[2]
    if root not in listed:
        raise VerifyError(f"{folder / root} (the image's index) is not listed in {SUMS}")
    if not art.manifests:
        return
    document = docs.json(root)
    entries = document.get("manifests") if isinstance(document, dict) else None
    want = [m.digest for m in art.manifests]
    if isinstance(entries, list):
        have = [e.get("digest") for e in entries if isinstance(e, dict)]
    else:  # a single manifest: it is its own one platform manifest
        have = [digest]
    if have != want:
        raise VerifyError(
            f"{folder / root} lists platform manifests {', '.join(map(str, have)) or 'none'}; "
            f"release.json says {', '.join(map(str, want))}"
        )


def _check_release_json(docs: _Documents, staged: StagedRelease) -> int:
    """Every artifact release.json names is listed in SHA256SUMS with its digest; an
    image's layout agrees with its entry; each SBOM describes a listed artifact."""
    folder, listed = docs.folder, docs.listed
    artifacts = staged.listed()
    for art in artifacts:
        rel = _staged_file(folder, art.path, f"the {art.kind} artifact")
        if isinstance(art, StagedImage):
            _check_image(docs, art, rel)
            continue
        if rel not in listed:
            raise VerifyError(
                f"{folder / rel} is in {RELEASE_JSON} but not in {SUMS}: it was not staged"
            )
        if art.sha256 != listed[rel]:
            raise VerifyError(
                f"{folder / rel} has sha256 {listed[rel]}, release.json says {art.sha256}"
            )
    described = {a.path for a in artifacts} | {
        d for i in staged.images for d in (i.digest, *(m.digest for m in i.manifests))
    }
    for sbom in staged.files("sbom"):
        if sbom.of is not None and sbom.of not in described:
            raise VerifyError(
                f"{folder / sbom.path} describes {sbom.of}, which release.json does not list"
            )
    return len(artifacts)


def _check_provenance(
    docs: _Documents, staged: StagedRelease, public: ec.EllipticCurvePublicKey, version: str
) -> tuple[str, tuple[bytes, ...]]:
    """The provenance verified against `staged`: what was checked, and its lines."""
    path = docs.folder / PROVENANCE_FILE
    lines = tuple(line for line in docs.bytes(PROVENANCE_FILE).splitlines() if line.strip())
    if not lines:
        raise VerifyError(f"{path} is empty")
    want = {(s.name, s.algorithm, s.hexdigest) for s in expected_subjects(staged)}
    for number, line in enumerate(lines, 1):
        where = f"{path}:{number}"
        envelope = _load_json(line, path)
        if not isinstance(envelope, dict):
            raise VerifyError(f"{where}: not a DSSE envelope")
        statement = verify_envelope(envelope, public, where)
        if statement.get("predicateType") != SLSA_PREDICATE:
            raise VerifyError(f"{where}: predicateType is not {SLSA_PREDICATE}")
        predicate = statement.get("predicate")
        definition = predicate.get("buildDefinition") if isinstance(predicate, dict) else None
        params = definition.get("externalParameters") if isinstance(definition, dict) else None
        named = params.get("version") if isinstance(params, dict) else None
        if not isinstance(named, str) or named != version:
            raise VerifyError(f"{where}: the provenance is of version {named!r}, not {version}")
        have = subject_set(statement.get("subject"))
        if have != want:
            extra, missing = sorted(have - want), sorted(want - have)
            first = (
                f"names {extra[0][0]} ({extra[0][1]}:{extra[0][2]}), which release.json does not"
                if extra
                else f"lacks {missing[0][0]} ({missing[0][1]}:{missing[0][2]})"
            )
            raise VerifyError(f"{where}: the provenance's subjects differ: it {first}")
    return f"{PROVENANCE_FILE}: signature verified, {len(want)} subject(s) match", lines


def _check_sums(folder: Path, files: set[str], listed: dict[str, str]) -> _Documents:
    """Every file the sums list is there with its sha256, and none is unlisted; the
    documents parsed later (release.json, the provenance, each index.json) read once,
    as the bytes that were checked."""
    docs = _Documents(folder, listed)
    for rel in sorted(listed):
        if rel in _UNSUMMED:
            raise VerifyError(f"{folder / SUMS} lists {rel}, which is never summed")
        if rel not in files:
            raise VerifyError(f"{folder / rel} is listed in {SUMS} but missing")
        if rel in (RELEASE_JSON, PROVENANCE_FILE) or rel.endswith("/index.json"):
            docs.bytes(rel)  # read once: these bytes are the ones parsed below
            continue
        found = _sha256(folder / rel)
        if found != listed[rel]:
            raise VerifyError(f"{folder / rel} has sha256 {found}, {SUMS} says {listed[rel]}")
    for rel in sorted(files - set(listed) - _UNSUMMED):
        raise VerifyError(f"{folder / rel} is in the release but not in {SUMS}")
    return docs


def check_release(
    folder: Path,
    *,
    public: ec.EllipticCurvePublicKey | None = None,
    version: str | None = None,
    require_signed: bool = False,
) -> VerifiedRelease:
    """Check the staged release `folder` (see the module's doc); VerifyError naming the
    first mismatch (exit 1).

    `public`: the key SHA256SUMS.sig and the provenance must verify under; without
    it a signed folder is checked for integrity only. `version`: the version
    release.json (and the provenance) must name. `require_signed`: refuse a folder
    without SHA256SUMS.sig (a signing key vouches only for what it signed).
    """
    files = _files(folder)
    checks: list[str] = []
    signed = SUMS_SIG in files
    if require_signed and not signed:
        raise VerifyError(f"{folder / SUMS_SIG} is missing: the release is not signed")
    if SUMS not in files:
        raise VerifyError(f"{folder / SUMS} is missing: the folder is no staged release")
    if public is not None and signed:
        sums = verify_sums(folder, public)
        checks.append(f"{SUMS_SIG}: signature over {SUMS} verified")
    else:
        sums = read_capped(folder / SUMS, SUMS_LIMIT)
    try:
        text = sums.decode("utf-8")
    except UnicodeDecodeError:
        raise VerifyError(f"{folder / SUMS} is not UTF-8 text") from None
    listed = parse_sums(text, folder / SUMS)
    docs = _check_sums(folder, files, listed)
    checks.append(f"{SUMS}: {len(listed)} file(s) match")
    if RELEASE_JSON not in listed:
        raise VerifyError(f"{folder / RELEASE_JSON} is not listed in {SUMS}")
    document = docs.json(RELEASE_JSON)
    if not isinstance(document, dict) or not isinstance(document.get("version"), str):
        raise VerifyError(f"{folder / RELEASE_JSON} names no version")
    # Not what staging writes (a field missing or of another type): StagedError, exit 2.
    staged = parse_release(document, str(folder / RELEASE_JSON))
    named = staged.version
    if version is not None and not _same_version(named, version):
        raise VerifyError(
            f"{folder / RELEASE_JSON} is the release of {named}, not {version}: the folder "
            "was renamed or copied from another release"
        )
    count = _check_release_json(docs, staged)
    checks.append(f"{RELEASE_JSON}: {count} artifact(s) of {named} match")
    provenance: tuple[bytes, ...] = ()
    if public is not None and signed:
        if PROVENANCE_FILE not in listed:
            raise VerifyError(
                f"{folder / PROVENANCE_FILE} is missing: a signed release has provenance"
            )
        line, provenance = _check_provenance(docs, staged, public, named)
        checks.append(line)
    staged = staged.with_files(*covering(folder))
    return VerifiedRelease(folder, named, staged, signed, tuple(checks), provenance)


def verify_release(
    folder: Path, public: ec.EllipticCurvePublicKey, version: str | None = None
) -> Sequence[str]:
    """`shipyard verify FOLDER`: the signed check of `folder`; what was checked, a line each.

    The folder must be signed. Without `version`, a folder named like a version
    (dist/release/1.4.0) must hold the release of that version.
    """
    if version is None:
        version = _version_of(folder.name)  # as given: a link's own name proves nothing
    return check_release(folder, public=public, version=version, require_signed=True).checks


def _version_of(name: str) -> str | None:
    """`name` when it is a PEP 440 version (a folder named after its release)."""
    from packaging.version import InvalidVersion, Version

    try:
        Version(name)
    except InvalidVersion:
        return None
    return name


def _same_version(named: str, wanted: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(named) == Version(wanted)
    except InvalidVersion:
        return named == wanted
