"""Affected builds on real git repositories and a real uv workspace, offline."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from shipyard.engine.affected import Affected, affected
from shipyard.engine.changes import changed_files
from shipyard.engine.reasons import Reason
from shipyard.errors import UsageError
from shipyard.manifest import load_manifest
from shipyard.workspace import load_workspace
from tests.unit.builders.test_resolve import make_wheel

GIT = ("git", "-c", "user.email=t@t.invalid", "-c", "user.name=t", "-c", "commit.gpgsign=false")

# A root project (binary `acme`, source ".") holding a uv workspace of two libraries
# and three apps: cli -> acme-api -> acme-model -> helper; agent -> acme-model, fast.
MANIFEST = """\
schema: 1
project: {name: acme, version: "1.0.0", python: "3.11"}
defaults:
  image:
    env: {MODE: prod}
binaries:
  acme:
    source: .
    entrypoint: "acme:main"
  cli:
    source: apps/cli
    entrypoint: "acme_cli:main"
    # the level is a variable
    image: {env: {LEVEL: "${LEVEL:-3}"}}
  agent:
    source: apps/agent
    entrypoint: "acme_agent:main"
    image: {env: {MODE: agent}}
  solo:
    source: apps/solo
    entrypoint: "acme_solo:main"
"""


def git(repo: Path, *args: str) -> str:
    """Run git in `repo`; its output."""
    done = subprocess.run(
        [*GIT, "-C", str(repo), *args], capture_output=True, text=True, check=True
    )
    return done.stdout


def commit(repo: Path, message: str = "change") -> None:
    """Commit everything in `repo`."""
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)


def uv_env(tmp: Path, links: Path) -> dict[str, str]:
    """uv that sees only the wheels in `links` and touches no network or user config."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp),
        "UV_OFFLINE": "1",
        "UV_NO_INDEX": "1",
        "UV_NO_CONFIG": "1",
        "UV_FIND_LINKS": str(links),
        "UV_CACHE_DIR": str(tmp / "uv-cache"),
        "UV_PYTHON": sys.executable,
        "UV_PYTHON_DOWNLOADS": "never",
    }


def uv(folder: Path, env: Mapping[str, str], *args: str) -> None:
    """The real uv, in `folder`."""
    subprocess.run(
        [sys.executable, "-m", "uv", *args], cwd=folder, env=env, check=True, capture_output=True
    )


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The workspace repository, committed, written by `uv init`/`uv add`/`uv lock`."""
    tmp = tmp_path_factory.mktemp("affected")
    links = tmp / "links"
    make_wheel(links, "helper", "1.0", files={"helper/__init__.py": ""})
    make_wheel(links, "fast", "1.0", files={"fast/__init__.py": ""})
    env = uv_env(tmp, links)
    repo = tmp / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    uv(repo, env, "init", "-q", "--bare", "--no-workspace", "--name", "acme", ".")
    with (repo / "pyproject.toml").open("a") as pyproject:
        pyproject.write('\n[tool.uv.workspace]\nmembers = ["libs/*", "apps/*"]\n')
    for folder, name in [
        ("libs/model", "acme-model"),
        ("libs/api", "acme-api"),
        ("apps/cli", "acme-cli"),
        ("apps/agent", "acme-agent"),
        ("apps/solo", "acme-solo"),
    ]:
        uv(repo, env, "init", "-q", "--lib", "--name", name, folder)
    for package, *requirements in [
        ("acme-model", "helper"),
        ("acme-api", "acme-model"),
        ("acme-cli", "acme-api"),
        ("acme-agent", "acme-model", "fast"),
    ]:
        uv(repo, env, "add", "-q", "--frozen", "--package", package, *requirements)
    uv(repo, env, "lock", "-q")
    (repo / "binaries.yaml").write_text(MANIFEST)
    (repo / ".gitignore").write_text("*.log\n")
    commit(repo, "start")
    return repo, env


@pytest.fixture
def repo(template: tuple[Path, dict[str, str]], tmp_path: Path) -> Path:
    """A copy of the template for one test to change."""
    return Path(shutil.copytree(template[0], tmp_path / "repo", symlinks=True))


def run(
    repo: Path, since: str = "HEAD", binaries: list[str] | None = None
) -> dict[str, tuple[Reason, ...]]:
    """`affected` as the CLI will call it: the binary names and their reasons."""
    manifest = load_manifest(repo / "binaries.yaml", env={})
    found = affected(manifest, load_workspace(repo), since, binaries, env={})
    assert all(isinstance(a, Affected) and a.reasons for a in found)
    return {a.binary: a.reasons for a in found}


def edit(path: Path, text: str = "\nX = 1\n") -> None:
    """Append `text` to `path`."""
    with path.open("a") as handle:
        handle.write(text)


def test_nothing_changed_affects_nothing(repo: Path) -> None:
    assert changed_files(repo, "HEAD") == ()
    assert run(repo) == {}


def test_a_change_in_an_app_affects_only_it(repo: Path) -> None:
    edit(repo / "apps/cli/src/acme_cli/__init__.py")
    # Not `acme` either, whose source (the root) holds apps/cli: that is cli's source.
    assert run(repo) == {"cli": (Reason("source", "apps/cli/src/acme_cli/__init__.py"),)}
    assert str(run(repo)["cli"][0]) == "apps/cli/src/acme_cli/__init__.py changed"


def test_a_change_at_the_root_affects_only_the_root_binary(repo: Path) -> None:
    edit(repo / "README.md", "# acme\n")
    assert run(repo) == {"acme": (Reason("source", "README.md"),)}


def test_a_change_in_a_library_affects_exactly_its_dependents_with_the_chain(repo: Path) -> None:
    edit(repo / "libs/model/src/acme_model/__init__.py")
    path = "libs/model/src/acme_model/__init__.py"
    found = run(repo)
    assert found == {
        "cli": (Reason("library", path, ("acme-api", "acme-model")),),
        "agent": (Reason("library", path, ("acme-model",)),),
    }
    assert list(found) == ["cli", "agent"]  # manifest order
    assert str(found["cli"][0]) == f"{path} changed (through acme-api -> acme-model)"


def test_a_change_in_a_higher_library_affects_only_its_users(repo: Path) -> None:
    edit(repo / "libs/api/pyproject.toml", "# tweak\n")
    assert run(repo) == {"cli": (Reason("library", "libs/api/pyproject.toml", ("acme-api",)),)}


def test_untracked_files_count_and_ignored_ones_do_not(repo: Path) -> None:
    (repo / "apps/solo/src/acme_solo/new.py").write_text("Y = 2\n")
    (repo / "apps/agent/debug.log").write_text("ignored by .gitignore\n")
    cache = repo / "apps/cli/src/acme_cli/__pycache__"
    cache.mkdir()
    (cache / "x.pyc").write_bytes(b"never an input")
    (repo / "apps/cli/dist").mkdir()
    (repo / "apps/cli/dist/acme_cli-0.1.0.whl").write_bytes(b"an output, not an input")
    assert "apps/solo/src/acme_solo/new.py" in changed_files(repo, "HEAD")
    assert "apps/agent/debug.log" not in changed_files(repo, "HEAD")
    assert run(repo) == {"solo": (Reason("source", "apps/solo/src/acme_solo/new.py"),)}


def test_staged_and_deleted_files_count(repo: Path) -> None:
    (repo / "apps/solo/src/acme_solo/staged.py").write_text("")
    git(repo, "add", "apps/solo/src/acme_solo/staged.py")
    (repo / "apps/agent/README.md").unlink()
    assert run(repo) == {
        "agent": (Reason("source", "apps/agent/README.md"),),
        "solo": (Reason("source", "apps/solo/src/acme_solo/staged.py"),),
    }


def test_a_committed_change_since_the_commit_counts(repo: Path) -> None:
    edit(repo / "apps/solo/src/acme_solo/__init__.py")
    commit(repo)
    assert run(repo, "HEAD") == {}
    assert run(repo, "HEAD~1") == {
        "solo": (Reason("source", "apps/solo/src/acme_solo/__init__.py"),)
    }
    assert run(repo, "main~1") == run(repo, git(repo, "rev-parse", "HEAD~1").strip())


def test_a_committed_move_counts_on_both_sides(repo: Path) -> None:
    git(repo, "mv", "apps/solo/README.md", "apps/cli/SOLO.md")
    commit(repo)
    assert changed_files(repo, "HEAD~1") == ("apps/cli/SOLO.md", "apps/solo/README.md")
    assert set(run(repo, "HEAD~1")) == {"cli", "solo"}


def test_only_the_binaries_asked_about_are_listed(repo: Path) -> None:
    edit(repo / "libs/model/src/acme_model/__init__.py")
    assert list(run(repo, binaries=["agent", "solo"])) == ["agent"]
    with pytest.raises(UsageError, match="did you mean 'agent'"):
        run(repo, binaries=["agnet"])


def set_manifest(repo: Path, old: str, new: str) -> None:
    """Replace `old` by `new` in binaries.yaml."""
    text = (repo / "binaries.yaml").read_text()
    assert old in text
    (repo / "binaries.yaml").write_text(text.replace(old, new))


def test_editing_one_entry_affects_only_that_binary(repo: Path) -> None:
    set_manifest(repo, '    entrypoint: "acme_solo:main"\n', '    entrypoint: "acme_solo:run"\n')
    assert run(repo) == {
        "solo": (Reason("manifest", "binaries.yaml", detail="entry changed: entrypoint"),)
    }


def test_a_comment_or_an_equivalent_value_affects_nothing(repo: Path) -> None:
    set_manifest(repo, "# the level is a variable", "# the level is fixed now")
    set_manifest(repo, '"${LEVEL:-3}"', '"3"')  # expands to the same value
    assert changed_files(repo, "HEAD") == ("binaries.yaml",)
    # Not even `acme`, whose source folder holds binaries.yaml.
    assert run(repo) == {}


def test_a_variable_that_expands_differently_now_is_a_change(repo: Path) -> None:
    set_manifest(repo, '"${LEVEL:-3}"', '"4"')
    assert run(repo) == {
        "cli": (Reason("manifest", "binaries.yaml", detail="entry changed: image.env"),)
    }


def test_editing_defaults_affects_those_who_inherit_them(repo: Path) -> None:
    set_manifest(repo, "env: {MODE: prod}", "env: {MODE: staging}")
    found = run(repo)
    assert list(found) == ["acme", "cli", "solo"]  # agent sets MODE itself
    assert found["cli"] == (Reason("manifest", "binaries.yaml", detail="entry changed: image.env"),)


def test_a_new_binary_is_affected_and_a_group_is_not_an_input(repo: Path) -> None:
    edit(
        repo / "binaries.yaml",
        "groups:\n  apps: [cli, agent]\n"
        '  cli2:\n    source: apps/cli\n    entrypoint: "acme_cli:other"\n',
    )
    text = (repo / "binaries.yaml").read_text()
    # the group first, then the new binary under `binaries:`
    text = text.replace("groups:\n  apps: [cli, agent]\n", "")
    text = text.replace("binaries:\n", "groups:\n  apps: [cli, agent]\nbinaries:\n")
    (repo / "binaries.yaml").write_text(text)
    assert run(repo) == {"cli2": (Reason("manifest", "binaries.yaml", detail="new binary"),)}


def test_an_old_manifest_naming_a_deleted_folder_still_compares(repo: Path) -> None:
    set_manifest(repo, "  solo:\n    source: apps/solo\n", "  solo:\n    source: apps/gone\n")
    (repo / "apps/gone").mkdir()
    (repo / "apps/gone/pyproject.toml").write_text('[project]\nname = "gone"\nversion = "1"\n')
    commit(repo)
    shutil.rmtree(repo / "apps/gone")
    set_manifest(repo, "    source: apps/gone\n", "    source: apps/solo\n")
    commit(repo)
    found = run(repo, "HEAD~1")
    assert found["solo"] == (Reason("manifest", "binaries.yaml", detail="entry changed: source"),)
    # The deleted file is now judged by today's folders: under the root's source. (Counting
    # it errs towards a rebuild: at HEAD~1 it belonged to a nested source.)
    assert set(found) == {"solo", "acme"}
    assert found["acme"] == (Reason("source", "apps/gone/pyproject.toml"),)


def test_a_requirements_lock_and_a_dockerfile_context_are_inputs(repo: Path) -> None:
    digest = "0" * 64
    (repo / "locks").mkdir()
    (repo / "locks/solo.txt").write_text(f"helper==1.0 --hash=sha256:{digest}\n")
    (repo / "docker").mkdir()
    (repo / "docker/Dockerfile").write_text("FROM scratch\nCOPY entry.sh /\n")
    (repo / "docker/entry.sh").write_text("#!/bin/sh\n")
    set_manifest(
        repo,
        "    source: apps/solo\n",
        "    source: apps/solo\n    requirements: locks/solo.txt\n"
        "    outputs: [image]\n    image: {dockerfile: docker/Dockerfile}\n",
    )
    commit(repo)
    (repo / "locks/solo.txt").write_text(f"helper==1.1 --hash=sha256:{digest}\n")
    edit(repo / "docker/entry.sh", "echo hi\n")
    found = run(repo)
    assert found == {
        # The root's source holds both folders too: they are plain files of it.
        "acme": (Reason("source", "docker/entry.sh"), Reason("source", "locks/solo.txt")),
        "solo": (
            Reason("source", "docker/entry.sh", detail="in the Dockerfile's build context"),
            Reason("lock", "locks/solo.txt", detail="requirements lock changed"),
        ),
    }


def test_bumping_a_package_only_one_binary_uses_affects_only_it(
    repo: Path, template: tuple[Path, dict[str, str]]
) -> None:
    env = template[1]
    make_wheel(Path(env["UV_FIND_LINKS"]), "fast", "1.1", files={"fast/__init__.py": "V = 1\n"})
    uv(repo, env, "lock", "-q", "--upgrade-package", "fast")
    assert changed_files(repo, "HEAD") == ("uv.lock",)
    reasons = run(repo)
    assert reasons == {
        "agent": (Reason("lock", "uv.lock", detail="locked: fast 1.0 -> 1.1"),),
    }
    assert str(reasons["agent"][0]) == "uv.lock changed (locked: fast 1.0 -> 1.1)"


def test_a_lock_change_that_leaves_every_slice_alone_affects_nothing(
    repo: Path, template: tuple[Path, dict[str, str]]
) -> None:
    env = template[1]
    uv(repo, env, "init", "-q", "--lib", "--name", "acme-extra", "libs/extra")
    uv(repo, env, "add", "-q", "--frozen", "--package", "acme-extra", "helper")
    uv(repo, env, "lock", "-q")
    assert "uv.lock" in changed_files(repo, "HEAD")
    # A new library nobody uses: no binary's source, library or slice changed.
    assert run(repo) == {}


def test_a_lock_appearing_affects_every_binary_with_a_project(repo: Path) -> None:
    (repo / "uv.lock").unlink()
    commit(repo)
    git(repo, "checkout", "-q", "HEAD~1", "--", "uv.lock")
    found = run(repo, "HEAD")
    assert list(found) == ["acme", "cli", "agent", "solo"]
    assert found["solo"] == (Reason("lock", "uv.lock", detail="uv.lock added"),)


def test_bad_since_is_a_usage_error_naming_the_flag(repo: Path, tmp_path: Path) -> None:
    for since in ("no-such-branch", "HEAD~99", "--output=x"):
        with pytest.raises(UsageError, match="--since") as caught:
            changed_files(repo, since)
        assert caught.value.exit_code == 2
    with pytest.raises(UsageError, match="fetch-depth"):
        run(repo, "origin/main")
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(UsageError, match=r"--since=HEAD: .* is not a git work tree"):
        changed_files(plain, "HEAD")


def generate(root: Path, count: int) -> None:
    """A repository of `count` tiny projects, each depending on 1-3 earlier ones by name."""
    chooser = random.Random(14)
    lines = ["schema: 1", 'project: {name: big, version: "1.0.0"}', "binaries:"]
    for i in range(count):
        folder = root / "projects" / f"p{i:04}"
        (folder / f"p{i:04}").mkdir(parents=True)
        (folder / f"p{i:04}" / "__init__.py").write_text("")
        deps = (
            sorted({f"p{chooser.randrange(i):04}" for _ in range(chooser.randint(1, 3))})
            if i
            else []
        )
        (folder / "pyproject.toml").write_text(
            f'[project]\nname = "p{i:04}"\nversion = "1.0"\ndependencies = {deps!r}\n'.replace(
                "'", '"'
            )
        )
        lines += [f"  p{i:04}:", f"    source: projects/p{i:04}", f'    entrypoint: "p{i:04}:main"']
    (root / "binaries.yaml").write_text("\n".join(lines) + "\n")


def test_affected_on_a_thousand_projects_is_fast(tmp_path: Path) -> None:
    root = tmp_path / "big"
    root.mkdir()
    git(root, "init", "-q")
    generate(root, 1000)
    commit(root)
    edit(root / "projects/p0500/p0500/__init__.py")
    edit(root / "projects/p0003/pyproject.toml", "# a library used by many\n")
    (root / "projects/p0999/p0999/new.py").write_text("")

    started = time.perf_counter()
    manifest = load_manifest(root / "binaries.yaml", env={}, cache_dir=tmp_path / "cache")
    loaded = time.perf_counter()
    found = affected(manifest, load_workspace(root), "HEAD", env={})
    done = time.perf_counter()
    print(
        f"\naffected on 1,000 projects: {done - loaded:.3f} s (load_workspace + git + affected); "
        f"load_manifest (cold): {loaded - started:.3f} s; {len(found)} affected"
    )
    names = {a.binary for a in found}
    assert {"p0003", "p0500", "p0999"} <= names
    assert "p0000" not in names
    workspace = load_workspace(root)
    assert names == {"p0003", "p0500", "p0999", *workspace.dependents("p0003"),
                     *workspace.dependents("p0500")}  # fmt: skip
    for a in found:
        for reason in a.reasons:
            if reason.kind == "library":
                assert reason.via[-1] in {"p0003", "p0500"}
    assert done - loaded < 3.0

    # An edit to binaries.yaml costs a validation of the old one, once.
    text = (root / "binaries.yaml").read_text()
    (root / "binaries.yaml").write_text(text.replace('"p0042:main"', '"p0042:run"'))
    started = time.perf_counter()
    manifest = load_manifest(root / "binaries.yaml", env={})
    found = affected(manifest, load_workspace(root), "HEAD", env={})
    took = time.perf_counter() - started
    print(f"with binaries.yaml edited: {took:.3f} s (load_manifest included)")
    assert {a.binary for a in found} == names | {"p0042"}
    assert took < 6.0
