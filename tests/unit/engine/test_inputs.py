"""One answer to which files make up a binary's inputs (issue 27, item 4): what is nested
in a source (the plan and the keys leave it out) and which folder a changed file
belongs to (`--since`) come from the same folders."""

from __future__ import annotations

from pathlib import Path

from shipyard.engine.inputs import SourceFolders, relative
from shipyard.manifest import Binary, Image, Manifest, Project


def _manifest(root: Path, sources: dict[str, str]) -> Manifest:
    binaries = {
        name: Binary(
            name, root / folder, "m:main", ("wheel",), ("linux/amd64",), ("linux",), Image(), ()
        )
        for name, folder in sources.items()
    }
    project = Project("demo", "1.0", "3.11")
    return Manifest(root / "binaries.yaml", root, project, binaries, {"all": tuple(binaries)})


def test_nested_folders_and_the_shared_files_are_not_a_source_s_files(tmp_path: Path) -> None:
    folders = SourceFolders(
        _manifest(tmp_path, {"top": ".", "a": "apps/a", "deep": "apps/a/sub", "b": "apps/b"})
    )
    assert folders.nested(tmp_path) == (
        tmp_path / "apps" / "a",
        tmp_path / "apps" / "a" / "sub",
        tmp_path / "apps" / "b",
        tmp_path / "binaries.yaml",
        tmp_path / "uv.lock",
    )
    assert folders.nested(tmp_path / "apps" / "a") == (tmp_path / "apps" / "a" / "sub",)
    assert folders.nested(tmp_path / "apps" / "b") == ()
    assert folders.binaries == {
        ".": ["top"],
        "apps/a": ["a"],
        "apps/a/sub": ["deep"],
        "apps/b": ["b"],
    }


def test_a_changed_file_belongs_to_the_deepest_folder_holding_it(tmp_path: Path) -> None:
    folders = SourceFolders(_manifest(tmp_path, {"a": "apps/a", "deep": "apps/a/sub"}))
    assert folders.owner("apps/a/sub/x.py") == "apps/a/sub"
    assert folders.owner("apps/a/subway/x.py") == "apps/a"
    assert folders.owner("apps/a/x.py") == "apps/a"
    assert folders.owner("README.md") is None
    rooted = SourceFolders(_manifest(tmp_path, {"top": "."}))
    assert rooted.owner("README.md") == "." and rooted.owner("docs/x.md") == "."


def test_relative_paths_use_slashes_and_say_when_outside(tmp_path: Path) -> None:
    assert relative(tmp_path / "a" / "b", tmp_path) == "a/b"
    assert relative(tmp_path, tmp_path) == "."
    assert relative(tmp_path.parent, tmp_path) is None
