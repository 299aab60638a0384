"""The agent's optional YAML config file: where to serve the health endpoints."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = ["YAML_NATIVE", "AgentConfig", "AgentConfigError", "load_config", "parse_config"]

# PyYAML has CSafeLoader only when it was built against libyaml, as its native wheels are;
# it parses the same safe subset of YAML as SafeLoader, only faster.
_LOADER: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
YAML_NATIVE: bool = _LOADER is not yaml.SafeLoader
"""Whether config files are parsed by libyaml (True) or by PyYAML's pure-Python loader."""

_KEYS = ("host", "port")


class AgentConfigError(Exception):
    """A config file that cannot be read or does not describe an agent."""


@dataclass(frozen=True)
class AgentConfig:
    """Settings from the config file; None means "not set", so flags and defaults apply."""

    host: str | None = None
    port: int | None = None


def parse_config(data: object, source: str = "config") -> AgentConfig:
    """Validate the parsed YAML document ``data`` (None for an empty file)."""
    if data is None:
        return AgentConfig()
    if not isinstance(data, dict):
        raise AgentConfigError(
            f"{source}: expected a mapping of settings, got {type(data).__name__}"
        )
    unknown = sorted(str(key) for key in data if key not in _KEYS)
    if unknown:
        raise AgentConfigError(
            f"{source}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(_KEYS)}"
        )
    host, port = data.get("host"), data.get("port")
    if host is not None and (not isinstance(host, str) or not host):
        raise AgentConfigError(f"{source}: 'host' must be a non-empty string, got {host!r}")
    # bool is an int subclass, and `port: yes` is a classic YAML slip worth rejecting.
    if port is not None and (
        not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535
    ):
        raise AgentConfigError(f"{source}: 'port' must be an integer 0-65535, got {port!r}")
    return AgentConfig(host=host, port=port)


def load_config(path: Path) -> AgentConfig:
    """Read and validate the YAML config file at ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AgentConfigError(f"cannot read config {path}: {exc}") from exc
    try:
        # yaml.safe_load, but with the libyaml loader when there is one (_LOADER is safe).
        data = yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        raise AgentConfigError(f"{path} is not valid YAML: {exc}") from exc
    return parse_config(data, source=str(path))
