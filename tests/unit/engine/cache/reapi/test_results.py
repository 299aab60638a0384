"""shipyard's key and outputs as REAPI messages: the round trip, and what a restore refuses."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from shipyard.artifacts import Artifact, Distribution, Installed, Metadata
from shipyard.engine.cache.checks import Declared, RefusedEntry
from shipyard.engine.cache.reapi.results import (
    ABOUT,
    action_for,
    action_result,
    digest_of,
    parsed_result,
    result_files,
)
from shipyard.engine.cache.reapi.stubs import re_pb2


def _output(repo: Path, name: str, data: bytes, mode: int, kind: str, **more: object) -> Artifact:
    path = repo / "dist" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)
    sha256 = hashlib.sha256(data).hexdigest()
    return Artifact(kind, "app", "linux/amd64", path, sha256, len(data), **more)  # type: ignore[arg-type]


def _outputs(repo: Path) -> tuple[Artifact, ...]:
    installed = (Installed("linux/amd64", (Distribution("requests", "2.32.0"),)),)
    return (
        _output(repo, "zipapps/app.pyz", b"zipapp", 0o755, "zipapp", metadata=Metadata(installed)),
        _output(repo, "wheels/app-1.0-py3-none-any.whl", b"{}", 0o644, "wheel"),
    )


def test_an_action_result_round_trips_paths_digests_modes_and_descriptions(
    tmp_path: Path,
) -> None:
    outputs = _outputs(tmp_path)
    data = action_result(outputs, tmp_path).SerializeToString()
    files = result_files(parsed_result(data), Declared.dist())
    assert [f.parts for f in files] == [
        ("dist", "zipapps", "app.pyz"),
        ("dist", "wheels", "app-1.0-py3-none-any.whl"),
    ]
    assert [(f.sha256, f.size, f.mode) for f in files] == [
        (outputs[0].sha256, 6, 0o755),
        (outputs[1].sha256, 2, 0o644),
    ]
    assert [f.about.describe() for f in files] == [a.describe() for a in outputs]
    assert files[0].about.metadata.distributions() == (Distribution("requests", "2.32.0"),)


def test_the_action_digest_is_deterministic_and_the_key_s_alone() -> None:
    one, again, other = action_for("k" * 64), action_for("k" * 64), action_for("j" * 64)
    assert one == again
    assert one.digest != other.digest
    assert one.digest == digest_of(one.action)
    action = re_pb2.Action.FromString(one.action)
    assert action.command_digest == digest_of(one.command)
    command = re_pb2.Command.FromString(one.command)
    assert "k" * 64 in command.arguments
    assert list(command.output_paths) == ["dist"]


def _result(path: str = "dist/x.pyz", sha256: str = "a" * 64, size: int = 3) -> re_pb2.ActionResult:
    about = '{"kind": "zipapp", "binary": "app", "platform": "any", "metadata": {}}'
    return re_pb2.ActionResult(
        output_files=[
            re_pb2.OutputFile(
                path=path,
                digest=re_pb2.Digest(hash=sha256, size_bytes=size),
                node_properties=re_pb2.NodeProperties(
                    properties=[re_pb2.NodeProperty(name=ABOUT, value=about)]
                ),
            )
        ]
    )


def test_a_well_formed_result_is_accepted() -> None:
    (found,) = result_files(_result(), Declared.dist())
    assert (found.parts, found.mode, found.about.kind) == (("dist", "x.pyz"), 0o644, "zipapp")


@pytest.mark.parametrize(
    ("result", "reason"),
    [
        (_result(path="src/evil.py"), "not one of the action's"),
        (_result(path="dist/../setup.py"), "not normalised"),
        (_result(path="/etc/passwd"), "absolute"),
        (_result(path="dist/.git/hooks/x"), "hidden part"),
        (_result(sha256="A" * 64), "64 lowercase hex"),
        (_result(sha256="abc"), "64 lowercase hex"),
        (_result(size=-1), "not a byte count"),
    ],
)
def test_a_result_naming_what_a_store_never_writes_is_refused(
    result: re_pb2.ActionResult, reason: str
) -> None:
    with pytest.raises(RefusedEntry, match=reason):
        result_files(result, Declared.dist())


def test_a_failed_action_directories_links_and_foreign_descriptions_are_refused() -> None:
    failed = _result()
    failed.exit_code = 1
    with pytest.raises(RefusedEntry, match="failed action"):
        result_files(failed, Declared.dist())
    folder = _result()
    folder.output_directories.add(path="dist/x")
    with pytest.raises(RefusedEntry, match="directories or symbolic links"):
        result_files(folder, Declared.dist())
    link = _result()
    link.output_symlinks.add(path="dist/y", target="/etc/passwd")
    with pytest.raises(RefusedEntry, match="directories or symbolic links"):
        result_files(link, Declared.dist())
    bare = _result()
    bare.output_files[0].ClearField("node_properties")
    with pytest.raises(RefusedEntry, match="does not describe its artifact"):
        result_files(bare, Declared.dist())
    garbled = _result()
    garbled.output_files[0].node_properties.properties[0].value = "{not json"
    with pytest.raises(RefusedEntry, match="not JSON"):
        result_files(garbled, Declared.dist())


def test_bytes_that_are_no_action_result_are_refused() -> None:
    with pytest.raises(RefusedEntry, match="not a protobuf message"):
        parsed_result(b"\xff\xff\xff\xff")
