"""One git question per build gives every source the answer its own question would."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from shipyard.files.sources import GitIgnored, _git_ignored, source_files, tree_hash


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _write(path: Path, text: str = "x\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A work tree with ignore rules at several levels, an ignored folder and a nested clone."""
    root = tmp_path / "repo"
    _write(root / ".gitignore", "*.log\nscratch/\n/top-only.txt\n")
    _write(root / "a/pkg/__init__.py")
    _write(root / "a/pkg/debug.log")  # ignored by the root's rule
    _write(root / "a/.gitignore", "generated/\n")
    _write(root / "a/generated/out.py")  # ignored by a/.gitignore
    _write(root / "a/top-only.txt")  # the root rule is anchored: not ignored here
    _write(root / "top-only.txt")
    _write(root / "scratch/b/mod.py")  # a source inside a folder ignored whole
    _write(root / "vendored/.gitignore", "private.py\n")
    _write(root / "vendored/lib.py")
    _write(root / "vendored/private.py")  # ignored only by the nested clone's rules
    _git(root, "init", "-q")
    _git(root / "vendored", "init", "-q")
    return root


@pytest.mark.parametrize("source", [".", "a", "a/pkg", "scratch/b", "vendored"])
def test_the_shared_answer_is_the_per_source_answer(repo: Path, source: str) -> None:
    shared = GitIgnored(repo)
    assert shared.under(repo / source) == _git_ignored(repo / source)


def test_the_answers_differ_where_the_rules_do(repo: Path) -> None:
    shared = GitIgnored(repo)
    assert shared.under(repo / "a") == frozenset({"pkg/debug.log", "generated/"})
    assert shared.under(repo / "vendored") == frozenset({"private.py"})


def test_files_and_hashes_are_the_same_with_the_shared_answer(repo: Path) -> None:
    shared = GitIgnored(repo)
    for source in ("a", "scratch/b", "vendored"):
        alone = source_files(repo / source, root=repo)
        assert source_files(repo / source, root=repo, git=shared) == alone
        assert tree_hash(repo / source, "k", root=repo, git=shared) == tree_hash(
            repo / source, "k", root=repo
        )
    assert [p.name for p in source_files(repo / "a", root=repo, git=shared)] == [
        ".gitignore",
        "__init__.py",
        "top-only.txt",
    ]


def test_without_git_every_source_is_walked(tmp_path: Path) -> None:
    _write(tmp_path / "s/keep.py")
    _write(tmp_path / "s/build/junk.py")  # a build folder is never an input
    shared = GitIgnored(tmp_path)
    assert shared.under(tmp_path / "s") is None
    assert [p.name for p in source_files(tmp_path / "s", git=shared)] == ["keep.py"]


@pytest.mark.parametrize("with_git", [False, True], ids=["plain", "git"])
def test_a_folder_named_build_below_the_top_of_a_source_is_hashed(
    tmp_path: Path, with_git: bool
) -> None:
    """Only a source's own build/ and dist/ (backend output) are skipped, not code so named."""
    source = tmp_path / "s"
    _write(source / "pkg/build/engine.py", "STEP = 1\n")
    _write(source / "pkg/dist/paths.py", "DIST = 'dist'\n")
    _write(source / "build/lib/pkg/copy.py")  # setuptools' in-place output: not an input
    _write(source / "dist/pkg-1.0-py3-none-any.whl")
    if with_git:
        _git(source, "init", "-q")
    names = [p.relative_to(source).as_posix() for p in source_files(source)]
    assert names == ["pkg/build/engine.py", "pkg/dist/paths.py"]
    before = tree_hash(source, "k")
    _write(source / "pkg/build/engine.py", "STEP = 2\n")
    edited = tree_hash(source, "k")
    assert edited != before
    _write(source / "build/lib/pkg/copy.py", "changed\n")
    _write(source / "dist/pkg-1.0-py3-none-any.whl", "changed\n")
    assert tree_hash(source, "k") == edited


def test_editing_any_module_of_shipyard_changes_its_own_wheel_key(tmp_path: Path) -> None:
    """Regression (issue 13): the walker skipped every folder named `build`, so an
    edit under the old src/shipyard/build/ left shipyard's wheel key unchanged and
    the next build was a stale cache hit. Every .py file under src/shipyard of a
    copy of this repository is edited in turn; each edit must change the key the
    wheel builder hashes for the `shipyard` binary's source."""
    from shipyard.engine.plan import Selection, make_plan
    from shipyard.manifest import load_manifest

    repo = Path(__file__).resolve().parents[3]
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=True
    ).stdout.decode()
    copy = tmp_path / "repo"
    for name in filter(None, listed.split("\0")):
        if (repo / name).is_file() and not (repo / name).is_symlink():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(repo / name, copy / name)
    _git(copy, "init", "-q")
    _git(copy, "add", "-A")
    manifest = load_manifest(copy / "binaries.yaml")
    plan = make_plan(manifest, Selection(binaries=("shipyard",), outputs=("wheel",)))
    (wheel,) = [a for a in plan.actions if a.kind == "wheel"]

    def key() -> str:
        return tree_hash(wheel.source, exclude=wheel.nested, root=copy, git=GitIgnored(copy))

    before = key()
    modules = sorted((copy / "src" / "shipyard").rglob("*.py"))
    assert len(modules) > 50
    unchanged = []
    for module in modules:
        text = module.read_text()
        module.write_text(text + "# edited\n")
        if key() == before:
            unchanged.append(module.relative_to(copy).as_posix())
        module.write_text(text)
    assert not unchanged, f"edits that left shipyard's wheel key unchanged: {unchanged}"
    assert key() == before
