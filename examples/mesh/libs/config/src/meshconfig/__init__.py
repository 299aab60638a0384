"""mesh-config: the mesh's YAML config files, parsed by libyaml when PyYAML has it.

`load_yaml` reads any config file safely; `load_agent_config` reads and validates
mesh-agent's. Every problem is a `ConfigError` naming the file and what to fix.
"""

from importlib import metadata

from meshconfig.agent import AgentConfig, load_agent_config, parse_agent_config
from meshconfig.yamlfile import YAML_NATIVE, ConfigError, load_yaml

__all__ = [
    "DISTRIBUTION",
    "YAML_NATIVE",
    "AgentConfig",
    "ConfigError",
    "installed_version",
    "load_agent_config",
    "load_yaml",
    "parse_agent_config",
]

DISTRIBUTION = "mesh-config"
"""The distribution (project) name this package is installed as."""


def installed_version() -> str:
    """The installed mesh-config's version, or ``0.0.0+source`` from a source tree."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0.0.0+source"
