"""Documents from a registry, a layout or an archive that are not what they claim: bad
JSON, JSON nested too deep for the parser, entries of the wrong type. Each is the
reader's typed error (OCIError, RegistryError, a refused cache entry), never a
RecursionError, AttributeError or JSONDecodeError traceback.

Regression (security review, item 2): `Registry.get_manifest` probed a manifest's
mediaType with `suppress(ValueError, AttributeError)`, so a registry serving `[` * 200000
as application/json gave a RecursionError traceback through `shipyard verify`, base pulls,
promote and the remote cache; `index_entries(b'{"manifests":["x"]}')` raised
AttributeError (`Descriptor.from_json` assumed a mapping) and `_document` let
JSONDecodeError through, while promote catches only OCIError.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from shipyard.engine.cache.remote import RemoteCache
from shipyard.oci.archive import read_docker_archive
from shipyard.oci.layer import BlobStore
from shipyard.oci.layout import find_images, index_entries, layout_tops, manifest_blobs
from shipyard.oci.model import Descriptor, OCIError, Platform
from shipyard.oci.remote.registry import RegistryError
from tests.reliability import record
from tests.unit._fake_registry import FakeRegistry, Seen, client, errors, fake, sleeps

__all__ = ["fake", "sleeps"]  # fixtures the tests take, imported for pytest to find

DEEP = b"[" * 200_000  # far past the recursion limit
DIGEST = "sha256:" + "a" * 64
GOOD = {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": DIGEST, "size": 7}


def _index(*entries: object) -> bytes:
    return json.dumps({"schemaVersion": 2, "manifests": list(entries)}).encode()


def _with(**changes: object) -> dict[str, object]:
    return {**GOOD, **changes}


# Documents an index or manifest reader is handed: each must be an OCIError.
HOSTILE_INDEXES: dict[str, bytes] = {
    "nested 200000 deep": DEEP,
    "deep inside an entry": b'{"manifests":[{"annotations":' + DEEP + b"}]}",
    "not JSON": b"{not json",
    "not UTF-8": b"\xff\xfe\xfa",
    "empty": b"",
    "a list": b'["x"]',
    "a string entry": b'{"manifests":["x"]}',
    "a number entry": b'{"manifests":[1]}',
    "a null entry": b'{"manifests":[null]}',
    "a list entry": b'{"manifests":[[]]}',
    "manifests is an object": b'{"manifests":{"a":1}}',
    "mediaType is a list": _index(_with(mediaType=[1])),
    "digest is an object": _index(_with(digest={"a": 1})),
    "size is a string": _index(_with(size="7")),
    "size is true": _index(_with(size=True)),
    "size is negative": _index(_with(size=-1)),
    "size of 5000 digits": b'{"manifests":[{"size":' + b"9" * 5000 + b"}]}",
    "platform is a string": _index(_with(platform="linux/amd64")),
    "platform os is an object": _index(_with(platform={"os": {}, "architecture": "amd64"})),
    "annotations is a list": _index(_with(annotations=["a"])),
    "an annotation is a number": _index(_with(annotations={"a": 1})),
}
HOSTILE_MANIFESTS: dict[str, bytes] = {
    "nested 200000 deep": DEEP,
    "not JSON": b"{not json",
    "a list": b"[]",
    "a string layer": json.dumps({"config": GOOD, "layers": ["x"]}).encode(),
    "a null layer": json.dumps({"config": GOOD, "layers": [None]}).encode(),
    "a config without a digest": json.dumps({"config": {"size": 1}, "layers": []}).encode(),
}


def _nowhere(desc: Descriptor) -> Path:
    raise AssertionError(f"no layer of a hostile document is looked for ({desc.digest})")


def _raises_oci_error(call: Callable[[], object]) -> str | None:
    """None when `call` raised OCIError, else what it did instead."""
    try:
        got = call()
    except OCIError:
        return None
    except BaseException as exc:  # the bug: anything else escapes
        return f"{type(exc).__name__}: {str(exc)[:100]}"
    return f"returned {got!r:.100}"


@pytest.mark.reliability
def test_hostile_index_and_manifest_documents_are_oci_errors(tmp_path: Path) -> None:
    """Bug: RecursionError, AttributeError and JSONDecodeError escaped the readers."""
    problems: list[str] = []
    for case, data in HOSTILE_INDEXES.items():
        for reader in (index_entries, manifest_blobs):
            escaped = _raises_oci_error(lambda: reader(data))  # noqa: B023
            if escaped:
                problems.append(f"{reader.__name__}({case}): {escaped}")
        # The same bytes as a layout's index.json, and as a blob an index names.
        layout = tmp_path / case.replace(" ", "-")
        layout.mkdir()
        (layout / "index.json").write_bytes(data)
        escaped = _raises_oci_error(lambda: layout_tops(layout))  # noqa: B023
        if escaped:
            problems.append(f"layout_tops({case}): {escaped}")
        top = Descriptor("application/vnd.oci.image.index.v1+json", DIGEST, len(data))
        escaped = _raises_oci_error(
            lambda: find_images([top], [Platform("linux", "amd64")], lambda _: data, _nowhere)  # noqa: B023
        )
        if escaped:
            problems.append(f"find_images({case}): {escaped}")
    for case, data in HOSTILE_MANIFESTS.items():
        escaped = _raises_oci_error(lambda: manifest_blobs(data))  # noqa: B023
        if escaped:
            problems.append(f"manifest_blobs({case}): {escaped}")
        top = Descriptor("application/vnd.oci.image.manifest.v1+json", DIGEST, len(data))
        escaped = _raises_oci_error(
            lambda: find_images([top], [Platform("linux", "amd64")], lambda _: data, _nowhere)  # noqa: B023
        )
        if escaped:
            problems.append(f"find_images(manifest {case}): {escaped}")
    for value in ("x", 1, None, [], [GOOD]):
        escaped = _raises_oci_error(lambda: Descriptor.from_json(value))  # noqa: B023
        if escaped:
            problems.append(f"Descriptor.from_json({value!r}): {escaped}")
    assert not problems, "\n".join(problems)
    cases = 4 * len(HOSTILE_INDEXES) + 2 * len(HOSTILE_MANIFESTS) + 5
    record(
        "hostile index and manifest documents",
        area="hostile documents",
        cases=cases,
        injected=f"{len(HOSTILE_INDEXES)} index documents and {len(HOSTILE_MANIFESTS)} "
        "manifests (JSON nested 200000 deep, not JSON, not UTF-8, entries that are strings, "
        "numbers, null or lists, fields of the wrong type, a 5000-digit size) through "
        "index_entries, manifest_blobs, layout_tops, find_images and Descriptor.from_json",
        result=f"{cases}/{cases} raised OCIError; no other exception escaped",
        figures={"cases": cases, "escaped": 0},
    )


def _docker_archive(path: Path, manifest: bytes) -> Path:
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
    return path


@pytest.mark.parametrize("manifest", [DEEP, b"{}"], ids=["deep", "an object"])
def test_a_hostile_docker_archive_manifest_is_an_oci_error(tmp_path: Path, manifest: bytes) -> None:
    """Bug: a deep manifest.json gave RecursionError, and one that is an object, not a
    list, was read as an archive of no image."""
    archive = _docker_archive(tmp_path / "base.tar", manifest)
    with pytest.raises(OCIError, match="not a docker-archive"):
        read_docker_archive(archive, BlobStore(tmp_path / "store"))


def _serve_deep_manifests(fake: FakeRegistry) -> None:
    """A registry whose every manifest is `[` * 200000 as application/json."""
    fake.route("GET", "/v2/", (200, {}, b"{}"))

    def manifest(seen: Seen) -> tuple[int, dict[str, str], bytes]:
        if "/manifests/" not in seen.path:
            return 404, {}, errors("NAME_UNKNOWN", "no")
        return 200, {"Content-Type": "application/json"}, DEEP

    for method in ("GET", "HEAD"):
        for path in ("/v2/x/y/manifests/v1", "/v2/cache/repo/manifests/key"):
            fake.route(method, path, manifest)


def test_a_deep_manifest_from_a_registry_is_no_traceback(
    fake: FakeRegistry, sleeps: list[float], tmp_path: Path
) -> None:
    """Bug: `get_manifest` raised RecursionError probing the mediaType; the remote cache
    then took it for an entry to restore."""
    _serve_deep_manifests(fake)
    registry, _ = client(fake, sleeps)
    data, media_type, digest = registry.get_manifest("x/y", "v1")
    assert data == DEEP and media_type == "application/json"
    assert digest == "sha256:" + hashlib.sha256(DEEP).hexdigest()
    # The remote cache: a miss (logged), never an exception.
    assert RemoteCache(registry, "cache/repo").restore("key", tmp_path) is None


@pytest.mark.parametrize(
    ("where", "body"),
    [("a tag list", DEEP), ("a tag list", b'{"tags":[{"a":1}]}'), ("an error body", DEEP)],
    ids=["deep tags", "a tag that is an object", "deep error body"],
)
def test_hostile_registry_answers_are_registry_errors(
    fake: FakeRegistry, sleeps: list[float], where: str, body: bytes
) -> None:
    """Bug: the tag list and an error body were parsed with nothing catching
    RecursionError, and a tag that is no string was taken as its repr."""
    if where == "a tag list":
        fake.route("GET", "/v2/x/y/tags/list", (200, {"Content-Type": "application/json"}, body))
    else:
        fake.route("GET", "/v2/x/y/tags/list", (400, {"Content-Type": "application/json"}, body))
    registry, _ = client(fake, sleeps)
    with pytest.raises(RegistryError):
        registry.tags("x/y")


def test_a_deep_token_answer_is_a_registry_error(fake: FakeRegistry, sleeps: list[float]) -> None:
    """Bug: the token endpoint's answer was parsed with `resp.json()`, whose RecursionError
    nothing caught."""
    fake.route("GET", "/token", (200, {"Content-Type": "application/json"}, DEEP))
    challenge = f'Bearer realm="http://{fake.host}/token",service="fake"'
    fake.route(
        "GET",
        "/v2/x/y/manifests/v1",
        (401, {"WWW-Authenticate": challenge}, errors("UNAUTHORIZED", "authenticate")),
    )
    registry, _ = client(fake, sleeps)
    with pytest.raises(RegistryError, match="token"):
        registry.get_manifest("x/y", "v1")


_ENV = {
    **{k: v for k, v in os.environ.items() if not k.upper().startswith("SHIPYARD_")},
    "DOCKER_CONFIG": "/nonexistent",
}


def _shipyard(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shipyard", *args],
        cwd=cwd,
        env=_ENV,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@pytest.mark.reliability
def test_verify_against_a_registry_serving_a_deep_manifest_exits_1_with_one_line(
    fake: FakeRegistry, tmp_path: Path
) -> None:
    """Bug: `shipyard verify HOST/x/y:v1` ended in a RecursionError traceback."""
    made = _shipyard(tmp_path, "keygen", "--out", str(tmp_path / "K"))
    assert made.returncode == 0, made.stderr
    _serve_deep_manifests(fake)
    done = _shipyard(tmp_path, "verify", f"{fake.host}/x/y:v1", "--key", str(tmp_path / "K.pub"))
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 1, (done.stdout + done.stderr)[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and fake.host in lines[0], done.stderr
    record(
        "a registry serving a manifest nested 200000 deep",
        area="hostile documents",
        cases=1,
        injected="a loopback registry answering every manifest request with `[` * 200000 "
        "as application/json; `shipyard verify 127.0.0.1:PORT/x/y:v1 --key K.pub`",
        result=f"exit 1 with one line ({lines[0][:120]}), no traceback",
        figures={"exit": done.returncode, "lines": len(lines)},
    )
