"""A small repository for the graph's tests: libraries three deep, apps, an extra, a
binary built only on another OS, two binaries sharing a source, and a project no binary
uses. In-repo requirements are plain names (no uv workspace), so every project counts."""

from __future__ import annotations

from pathlib import Path

from shipyard.engine.graph import Graph, build_graph
from shipyard.engine.plan import Selection, host_os
from shipyard.engine.planning import load_projects
from shipyard.manifest import load_manifest
from tests.unit.engine.test_affected import commit, git

OTHER_OS = "windows" if host_os() != "windows" else "linux"

# folder -> (name, dependencies, optional dependencies)
PROJECTS: dict[str, tuple[str, list[str], dict[str, list[str]]]] = {
    "libs/model": ("acme-model", [], {}),
    "libs/api": ("acme-api", ["acme-model"], {}),
    "libs/extra": ("acme-extra", [], {}),
    "apps/cli": ("acme-cli", ["acme-api"], {"plus": ["acme-extra"]}),
    "apps/agent": ("acme-agent", ["acme-model"], {}),
    "apps/solo": ("acme-solo", [], {}),
    "tools/unused": ("acme-unused", ["acme-model"], {}),
}

MANIFEST = f"""\
schema: 1
project: {{name: acme, version: "1.0.0", python: "3.11"}}
defaults:
  platforms: [linux/amd64, linux/arm64]
  image: {{base: "oci-layout:base"}}
groups:
  apps: [cli, agent]
binaries:
  cli:
    source: apps/cli
    entrypoint: "acme_cli:main"
    outputs: [wheel, zipapp, image]
    extras: [plus]
  cli-docker:
    source: apps/cli
    entrypoint: "acme_cli:main"
    outputs: [wheel, image]
  agent:
    source: apps/agent
    entrypoint: "acme_agent:main"
    outputs: [zipapp]
    host: [{OTHER_OS}]
  solo:
    source: apps/solo
    entrypoint: "acme_solo:main"
"""


def make_acme(repo: Path) -> Path:
    """Write the repository into `repo` and commit it."""
    for folder, (name, deps, extras) in PROJECTS.items():
        package = repo / folder / name.replace("-", "_")
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("def main() -> None:\n    pass\n")
        optional = "".join(f"{extra} = {values!r}\n" for extra, values in extras.items())
        (repo / folder / "pyproject.toml").write_text(
            f'[project]\nname = "{name}"\nversion = "1.0"\ndependencies = {deps!r}\n'
            + (f"[project.optional-dependencies]\n{optional}" if optional else "")
        )
    (repo / "binaries.yaml").write_text(MANIFEST)
    git(repo, "init", "-q")
    commit(repo, "start")
    return repo


def graph_of(repo: Path, selection: Selection | None = None, since: str | None = None) -> Graph:
    """`shipyard graph`'s graph of `repo`, as the CLI builds it."""
    manifest = load_manifest(repo / "binaries.yaml", env={})
    workspace = load_projects(manifest, cache_dir=repo / ".cache", env={})
    return build_graph(manifest, workspace, selection, since=since, env={})
