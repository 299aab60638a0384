"""The graph's nodes and edges: from the plan and the workspace, narrowed, and --since."""

from __future__ import annotations

from pathlib import Path

import pytest

from shipyard.engine.graph import Graph, build_graph
from shipyard.engine.plan import Selection
from shipyard.engine.planning import load_projects
from shipyard.errors import UsageError
from shipyard.manifest import load_manifest
from tests.unit.engine.graph._acme import graph_of

REPO = Path(__file__).resolve().parents[4]


def kinds(graph: Graph) -> dict[str, str]:
    """Each node's kind, by id."""
    return {n.id: n.kind for n in graph.nodes}


def links(graph: Graph, kind: str | None = None) -> set[tuple[str, str]]:
    """The edges (of `kind`) as (source, target)."""
    return {(e.source, e.target) for e in graph.edges if kind is None or e.kind == kind}


def test_every_project_library_binary_and_output_with_its_edges(template: Path) -> None:
    graph = graph_of(template)
    assert kinds(graph) == {
        "project:acme-api": "library",
        "project:acme-extra": "library",
        "project:acme-model": "library",
        "project:acme-unused": "library",  # no binary uses it: still a project of the repo
        "project:acme-agent": "project",
        "project:acme-cli": "project",
        "project:acme-solo": "project",
        "binary:agent": "binary",
        "binary:cli": "binary",
        "binary:cli-docker": "binary",
        "binary:solo": "binary",
        "zipapp:agent": "zipapp",  # built on another OS only: drawn all the same
        "wheel:apps/cli": "wheel",  # one wheel for the two binaries built from apps/cli
        "zipapp:cli": "zipapp",
        "image:cli": "image",
        "image:cli-docker": "image",
        "wheel:apps/solo": "wheel",
    }
    assert links(graph, "needs") == {
        ("project:acme-agent", "project:acme-model"),
        ("project:acme-cli", "project:acme-api"),
        ("project:acme-cli", "project:acme-extra"),
        ("project:acme-api", "project:acme-model"),
        ("project:acme-unused", "project:acme-model"),
    }
    assert {e.label for e in graph.edges if e.target == "project:acme-extra"} == {"plus"}
    assert links(graph, "source") == {
        ("binary:agent", "project:acme-agent"),
        ("binary:cli", "project:acme-cli"),
        ("binary:cli-docker", "project:acme-cli"),
        ("binary:solo", "project:acme-solo"),
    }
    assert links(graph, "output") == {
        ("binary:agent", "zipapp:agent"),
        ("binary:cli", "wheel:apps/cli"),
        ("binary:cli", "zipapp:cli"),
        ("binary:cli", "image:cli"),
        ("binary:cli-docker", "wheel:apps/cli"),
        ("binary:cli-docker", "image:cli-docker"),
        ("binary:solo", "wheel:apps/solo"),
    }
    assert graph.node("image:cli").detail.startswith("linux/amd64, linux/arm64")
    assert graph.node("project:acme-model").group == "libs"
    assert all(not n.state for n in graph.nodes) and graph.since is None


def test_every_edge_joins_two_nodes(template: Path) -> None:
    graph = graph_of(template)
    ids = set(kinds(graph))
    assert len(ids) == len(graph.nodes)
    assert all(e.source in ids and e.target in ids for e in graph.edges)


def test_binary_narrows_to_it_and_what_it_installs(template: Path) -> None:
    graph = graph_of(template, Selection(binaries=("agent",)))
    assert set(kinds(graph)) == {
        "project:acme-model",
        "project:acme-agent",
        "binary:agent",
        "zipapp:agent",
    }
    assert links(graph) == {
        ("project:acme-agent", "project:acme-model"),
        ("binary:agent", "project:acme-agent"),
        ("binary:agent", "zipapp:agent"),
    }


def test_target_narrows_to_its_binaries_and_their_extras(template: Path) -> None:
    graph = graph_of(template, Selection(targets=("apps",)))
    binaries = {n.id for n in graph.nodes if n.kind == "binary"}
    assert binaries == {"binary:cli", "binary:agent"}
    # cli's extra `plus` brings acme-extra; nothing of solo or the unused project.
    assert "project:acme-extra" in kinds(graph)
    assert not {"project:acme-solo", "project:acme-unused", "wheel:apps/solo"} & set(kinds(graph))


def test_an_unknown_binary_names_the_flag(template: Path) -> None:
    with pytest.raises(UsageError, match=r"--binary=nope: unknown value"):
        graph_of(template, Selection(binaries=("nope",)))


def test_since_marks_the_changed_library_its_dependents_binaries_and_outputs(acme: Path) -> None:
    (acme / "libs/model/acme_model/__init__.py").write_text("X = 2\n")
    graph = graph_of(acme, since="HEAD")
    states = {n.id: n.state for n in graph.nodes if n.state}
    assert states == {
        "project:acme-model": "changed",
        "project:acme-api": "affected",
        "project:acme-agent": "affected",
        "project:acme-cli": "affected",
        "binary:agent": "affected",
        "binary:cli": "affected",
        "binary:cli-docker": "affected",
        "zipapp:agent": "affected",
        "wheel:apps/cli": "affected",
        "zipapp:cli": "affected",
        "image:cli": "affected",
        "image:cli-docker": "affected",
    }
    path = "libs/model/acme_model/__init__.py"
    assert graph.node("project:acme-model").reasons == (f"{path} changed",)
    # The binary's reason is affected's own text, the chain included.
    assert graph.node("binary:cli").reasons == (f"{path} changed (through acme-api -> acme-model)",)
    assert graph.node("project:acme-api").reasons == (f"needs acme-model: {path} changed",)
    hot = {(e.source, e.target) for e in graph.edges if e.affected}
    assert ("project:acme-api", "project:acme-model") in hot
    assert ("project:acme-cli", "project:acme-api") in hot
    assert ("binary:cli", "image:cli") in hot
    assert ("project:acme-unused", "project:acme-model") not in hot  # no binary of its own
    assert ("binary:solo", "wheel:apps/solo") not in hot
    assert graph.since == "HEAD"


def test_since_a_change_in_an_app_marks_only_it(acme: Path) -> None:
    (acme / "apps/solo/acme_solo/new.py").write_text("Y = 1\n")
    graph = graph_of(acme, since="HEAD")
    assert {n.id: n.state for n in graph.nodes if n.state} == {
        "project:acme-solo": "changed",
        "binary:solo": "affected",
        "wheel:apps/solo": "affected",
    }


def test_since_nothing_changed_marks_nothing(template: Path) -> None:
    graph = graph_of(template, since="HEAD")
    assert graph.since == "HEAD"
    assert not any(n.state for n in graph.nodes) and not any(e.affected for e in graph.edges)


def test_the_example_suite(tmp_path: Path) -> None:
    manifest = load_manifest(REPO / "binaries.yaml", env={})
    workspace = load_projects(manifest, cache_dir=tmp_path, env={})
    graph = build_graph(manifest, workspace)
    found = kinds(graph)
    assert {f"binary:{name}" for name in manifest.binaries} <= set(found)
    assert found["project:mesh-api"] == found["project:mesh-config"] == "library"
    assert found["project:meshctl"] == "project"
    # The uv workspace's members, not the test fixtures' projects under tests/.
    assert all(not n.detail.startswith("tests/") for n in graph.nodes)
    assert ("project:mesh-agent", "project:mesh-config") in links(graph, "needs")
    echo = {e.source for e in graph.edges if e.target == "wheel:examples/mesh/echo"}
    assert echo == {"binary:echo", "binary:echo-docker"}
    assert "windows/arm64" in graph.node("zipapp:meshctl").detail
    assert "variants debug, distroless" in graph.node("image:mesh-agent").detail
