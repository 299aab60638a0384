"""Reading a YAML config file safely, with libyaml's parser when PyYAML was built with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["YAML_NATIVE", "ConfigError", "load_yaml"]

# PyYAML has CSafeLoader only when it was built against libyaml, as its native wheels are;
# it parses the same safe subset of YAML as SafeLoader, only faster.
_LOADER: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
YAML_NATIVE: bool = _LOADER is not yaml.SafeLoader
"""Whether config files are parsed by libyaml (True) or by PyYAML's pure-Python loader."""


class ConfigError(Exception):
    """A config file that cannot be read, is not YAML, or does not describe what it should."""


def load_yaml(path: Path) -> object:
    """The YAML document in the file at ``path`` (None for an empty file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from exc
    try:
        # yaml.safe_load, but with the libyaml loader when there is one (_LOADER is safe).
        return yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
