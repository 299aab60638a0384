"""The grammar of each manifest value, as the annotated types the models are made of.

Names, entry points, platforms, environment variable names, image tags, hubs, bases
and users, commands, durations, sizes and Python versions: each type holds its value
to the grammar of where it goes (a file name, an image config, a registry URL, an
argument vector), and names the fix when it does not. Patterns show in the JSON
Schema; validators, which run after `${}` expansion, do not.
"""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING, Annotated, Literal, TypeAlias

from packaging.version import InvalidVersion, Version
from pydantic import AfterValidator, StringConstraints, WithJsonSchema

from shipyard.manifest._types import (
    HOST_OS,
    IMAGE_PLATFORMS,
    OUTPUT_KINDS,
    PLATFORMS,
    parse_duration,
    parse_size,
)
from shipyard.oci.basespec import parse_base
from shipyard.oci.remote.reference import COMPONENT, HOST, MAX_NAME, TAG

__all__ = [
    "PYTHON_PATTERN",
    "PYTHON_PLACEHOLDER",
    "PYTHON_SCHEMA",
    "BaseImage",
    "Command",
    "Duration",
    "EntryPoint",
    "EnvName",
    "GroupName",
    "HostOS",
    "Hub",
    "Line",
    "LinuxPlatform",
    "Name",
    "Output",
    "Platform",
    "ProjectVersion",
    "PythonVersion",
    "Size",
    "StageName",
    "Tag",
    "Text",
    "User",
]

# Names become file names, image repositories and PEP 508 names, so they use the
# intersection of those grammars: lower case, digits, and . _ - inside.
Name = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$")]
EntryPoint = Annotated[
    str,
    StringConstraints(
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
    ),
]
# The output kinds, platforms and host OSes are defined once, in _types (the engine
# reads them there without pydantic); the model's Literal types are made from them.
if TYPE_CHECKING:  # a Literal of a runtime tuple is not a type to mypy: a str to it
    Output: TypeAlias = str
    LinuxPlatform: TypeAlias = str
    Platform: TypeAlias = str
    HostOS: TypeAlias = str
else:
    Output = Literal[OUTPUT_KINDS]
    # The platforms an image may have: Linux only.
    LinuxPlatform = Literal[IMAGE_PLATFORMS]
    # A binary's platforms: its zipapp may also be for macOS and Windows (its image
    # may not: see _binary_checks' check of the image's platforms).
    Platform = Literal[PLATFORMS]
    HostOS = Literal[HOST_OS]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]

# The checks below run after `${}` expansion, on what the tools will be given; as
# validators rather than patterns they stay out of the JSON Schema, which sees the
# text before expansion. Values reach file names, image configs, registry URLs and
# argument vectors (never a shell), so each is held to the grammar of where it goes.

# Control characters, and line breaks a single-line value must not hold.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_BREAK = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _one_line(value: str) -> str:
    if _BREAK.search(value):
        raise ValueError("write it on one line, without control characters")
    return value


def _no_controls(value: str) -> str:
    if _CONTROL.search(value):
        raise ValueError("remove the control characters")
    return value


Line = Annotated[str, AfterValidator(_one_line)]
Text = Annotated[str, AfterValidator(_no_controls)]

# Hubs and tags follow the OCI distribution grammar, defined once in
# shipyard.oci.remote.reference (pure patterns: no HTTP stack, no credentials), which
# checks each reference again before any request. image.base is parsed by
# shipyard.oci.basespec.
# The image config's User: a name or id, optionally with a group name or id.
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,63})?")


def _tag(value: str) -> str:
    if not TAG.fullmatch(value):
        raise ValueError(
            "an image tag is 1-128 letters, digits, '_', '.' or '-', not starting with '.' or '-'"
        )
    return value


def _registry(value: str) -> tuple[str, str]:
    """Check `host[:port][/path]`; return the host and the path."""
    if "://" in value:
        raise ValueError("leave out the scheme: write host[:port]/path, e.g. ghcr.io/acme")
    host, _, path = value.partition("/")
    if not HOST.fullmatch(host) or not ("." in host or ":" in host or host == "localhost"):
        raise ValueError("start with a registry host[:port], e.g. 127.0.0.1:5000/mesh")
    port = host.rpartition(":")[2] if not host.endswith("]") and ":" in host else ""
    if port and not 0 < int(port) < 65536:
        raise ValueError("a port is 1-65535")
    return host, path


def _repository(path: str) -> None:
    if len(path) > MAX_NAME:
        raise ValueError(f"a repository path is at most {MAX_NAME} characters")
    if not all(COMPONENT.fullmatch(part) for part in path.split("/")):
        raise ValueError(
            "a repository path is lower-case letters and digits, separated by "
            "'.', '_', '__' or '-', in parts joined by '/'"
        )


def _hub(value: str) -> str:
    _, path = _registry(value)
    if path or value.endswith("/"):
        _repository(path)
    return value


# `${python}` in image.base (and a variant's base) stands for each target Python; the
# expansion of environment variables leaves it alone (see _expand.py).
PYTHON_PLACEHOLDER = "${python}"


def _base(value: str) -> str:
    # The one parser of image.base, which the action key and the loader use too;
    # its InvalidBase is a ValueError, so pydantic reports it as this key's problem.
    # `${python}` becomes a version (all versions have the same shape) to be parsed.
    parse_base(value.replace(PYTHON_PLACEHOLDER, "3.11"))
    return value


def _user(value: str) -> str:
    if not _USER.fullmatch(value):
        raise ValueError("write a user or uid, optionally :group or :gid, e.g. 65532 or app:app")
    return value


def _version(value: str) -> str:
    if value != "git":
        try:
            Version(value)
        except InvalidVersion:
            raise ValueError("write a PEP 440 version such as 1.4.0, or git") from None
    return value


def _size(value: str) -> str:
    parse_size(value)  # its ValueError names the fix
    return value


def _command(value: str) -> str:
    _one_line(value)
    try:
        words = shlex.split(value)
    except ValueError as exc:  # an unclosed quote
        raise ValueError(
            f"{exc}: close the quote (the command is split as a shell would)"
        ) from None
    if not words:
        raise ValueError("write a command, e.g. python -m pytest")
    return value


def _duration(value: str | int) -> str | int:
    parse_duration(value)  # its ValueError names the fix
    return value


Tag = Annotated[str, AfterValidator(_tag)]
Command = Annotated[str, AfterValidator(_command)]
Duration = Annotated[
    str | int,
    AfterValidator(_duration),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?(s|m|h)$"},
                {"type": "integer", "minimum": 1},
            ],
            "description": "seconds, or a number with s, m or h: 90, 90s, 10m, 1h",
        }
    ),
]
Size = Annotated[str, AfterValidator(_size)]
Hub = Annotated[str, AfterValidator(_hub)]
BaseImage = Annotated[str, AfterValidator(_base)]
User = Annotated[str, AfterValidator(_user)]
ProjectVersion = Annotated[str, AfterValidator(_version)]

StageName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]{0,30}$")]
GroupName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")]

# project.python: one version or a list of them, held as a list (see ProjectDoc).
PYTHON_PATTERN = r"^3\.[0-9]{1,2}$"
PythonVersion = Annotated[str, StringConstraints(pattern=PYTHON_PATTERN)]
PYTHON_SCHEMA = {
    "anyOf": [
        {"type": "string", "pattern": PYTHON_PATTERN},
        {
            "type": "array",
            "items": {"type": "string", "pattern": PYTHON_PATTERN},
            "minItems": 1,
            "uniqueItems": True,
        },
    ],
    "default": "3.11",
    "description": 'Target interpreter(s), major.minor: one ("3.11") or a list '
    '(["3.11", "3.12"]; the first is the default image\'s)',
    "title": "Python",
}
