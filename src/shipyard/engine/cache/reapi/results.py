"""shipyard's action key and outputs as Remote Execution API messages, and back, checked.

The key travels as a Command (arguments and one environment variable made of the
key and this format's version, one output path: dist) and an Action naming it and
the empty input root: the Action's digest is the ActionCache key, the same for the
gRPC and the HTTP protocol, deterministic for a key. The outputs are the
ActionResult's output files, each with its repository-relative path under dist/,
its CAS digest, whether it is executable (mode 755, else 644) and the artifact's
description as a node property.

An ActionResult read back is untrusted: `result_files` checks every field with the
checks every cache uses (`shipyard.engine.cache.checks`) and raises RefusedEntry
for anything a store does not write.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import DecodeError

from shipyard import _json
from shipyard._environ import ACTION_KEY
from shipyard.artifacts import Artifact
from shipyard.engine.cache.checks import (
    Declared,
    RefusedEntry,
    checked_description,
    checked_path,
    checked_sha256,
    checked_size,
    stored_mode,
)
from shipyard.engine.cache.reapi.stubs import re_pb2
from shipyard.engine.cache.restore import PlacedFile

__all__ = [
    "FORMAT",
    "ActionMessages",
    "action_for",
    "action_result",
    "digest_of",
    "parsed_result",
    "result_files",
]

FORMAT = "shipyard-cache-v1"  # in every Command: a new format gets new action digests
KEY_VARIABLE = ACTION_KEY.name
ABOUT = "dev.shipyard.artifact"  # node property: the artifact's kind, binary, platform, metadata
_MAX_RESULT = 16 << 20  # bytes of an ActionResult message a restore reads at most


@dataclass(frozen=True)
class ActionMessages:
    """The Action and Command that stand for one shipyard key, serialized, and the
    Action's digest (the ActionCache key)."""

    action: bytes
    command: bytes
    digest: re_pb2.Digest


def digest_of(data: bytes) -> re_pb2.Digest:
    """The REAPI (SHA256) digest of `data`."""
    return re_pb2.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


def action_for(key: str) -> ActionMessages:
    """The Action and Command of shipyard's action `key` (deterministic: protobuf
    writes known fields in field order, and every list here has one order)."""
    command = re_pb2.Command(
        arguments=[FORMAT, key],
        environment_variables=[re_pb2.Command.EnvironmentVariable(name=KEY_VARIABLE, value=key)],
        output_paths=["dist"],
    ).SerializeToString(deterministic=True)
    action = re_pb2.Action(
        command_digest=digest_of(command),
        input_root_digest=digest_of(b""),  # the empty Directory: the key already says it all
    ).SerializeToString(deterministic=True)
    return ActionMessages(action, command, digest_of(action))


def action_result(outputs: tuple[Artifact, ...], repo: Path) -> re_pb2.ActionResult:
    """The ActionResult that records `outputs` (files under `repo`)."""
    files = []
    for artifact in outputs:
        about = json.dumps(artifact.describe(), sort_keys=True)
        files.append(
            re_pb2.OutputFile(
                path=artifact.path.relative_to(repo).as_posix(),
                digest=re_pb2.Digest(hash=artifact.sha256, size_bytes=artifact.size),
                is_executable=stored_mode(artifact.path) == 0o755,
                node_properties=re_pb2.NodeProperties(
                    properties=[re_pb2.NodeProperty(name=ABOUT, value=about)]
                ),
            )
        )
    return re_pb2.ActionResult(output_files=files, exit_code=0)


def parsed_result(data: bytes) -> re_pb2.ActionResult:
    """An ActionResult from the bytes a server sent; RefusedEntry if they are not one."""
    if len(data) > _MAX_RESULT:
        raise RefusedEntry(f"its ActionResult is larger than {_MAX_RESULT} bytes")
    try:
        return re_pb2.ActionResult.FromString(data)
    except DecodeError:
        raise RefusedEntry("its ActionResult is not a protobuf message") from None


def result_files(result: re_pb2.ActionResult, declared: Declared) -> list[PlacedFile]:
    """The checked output files of `result` (each PlacedFile's `source` still unset);
    RefusedEntry for anything a store does not write: a failed action, output
    directories or links, inline contents, a path `declared` does not allow, a
    digest that is not SHA256, a missing or foreign artifact description."""
    if result.exit_code != 0:
        raise RefusedEntry(f"it records a failed action (exit code {result.exit_code})")
    if (
        result.output_directories
        or result.output_symlinks
        or result.output_file_symlinks
        or result.output_directory_symlinks
    ):
        raise RefusedEntry("it has output directories or symbolic links; shipyard writes files")
    files: list[PlacedFile] = []
    for output in result.output_files:
        parts = checked_path(output.path, declared)
        if output.contents and not output.HasField("digest"):
            raise RefusedEntry(f"output {output.path!r} has inline contents and no digest")
        files.append(
            PlacedFile(
                Path(),
                parts,
                checked_sha256(output.digest.hash),
                checked_size(output.digest.size_bytes),
                0o755 if output.is_executable else 0o644,
                checked_description(_about(output), declared),
            )
        )
    return files


def _about(output: re_pb2.OutputFile) -> object:
    """The parsed artifact description of an output file (checked by the caller)."""
    found = [p.value for p in output.node_properties.properties if p.name == ABOUT]
    if len(found) != 1:
        raise RefusedEntry(f"output {output.path!r} does not describe its artifact")
    try:
        return _json.loads(found[0])
    except ValueError:
        raise RefusedEntry(
            f"output {output.path!r}: its artifact description is not JSON"
        ) from None
