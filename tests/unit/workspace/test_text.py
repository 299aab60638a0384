"""shipyard.workspace._text: positions of keys and values in pyproject.toml files."""

from __future__ import annotations

from pathlib import Path

from shipyard.workspace._text import Positions, TomlFile, Where, WorkspaceError


def test_positions_of_keys_and_values_in_hand_written_toml() -> None:
    text = (
        "# comment [not.a.table]\n"
        "[project]\n"
        'name = "x"  # "quoted" in a comment\n'
        'description = """multi\n[fake]\nline"""\n'
        "dependencies = [ 'a', # one\n"
        '  "b>=1; python_version < \\"3.12\\"",\n'
        '  ["nested"], {k = 1}, 1979-05-27 07:32:00, "c" ]\n'
        "optional-dependencies.extra = ['d']\n"
        '\n[[tool.things]]\nx = 1\n[[tool.things]]\n"quoted.key" = { a.b = [1, 2] }\n'
    )
    positions = Positions(text)
    assert positions.find(("project",)) == (2, 1)
    assert positions.find(("project", "dependencies", 0)) == (7, 18)
    assert positions.find(("project", "dependencies", 1)) == (8, 3)
    assert positions.find(("project", "dependencies", 5)) == (9, 45)
    assert positions.find(("project", "optional-dependencies", "extra", 0)) == (10, 32)
    assert positions.find(("tool", "things", 1, "quoted.key", "a", "b", 1)) == (15, 28)
    assert positions.find(("tool", "things", 1)) == (14, 1)
    assert positions.find(("nothing",)) == (1, 1)


def test_a_place_is_found_when_first_read() -> None:
    """The loader notes a place for every requirement; the text is tokenized only when
    one is shown, and the place is the same as one written out."""
    text = '[project]\nname = "a"\ndependencies = ["b", "c"]\n'
    file = TomlFile(Path("/r/p/pyproject.toml"), {}, text)
    where = file.where(("project", "dependencies", 1), root=Path("/r"))
    error = WorkspaceError(where, "bad", "fix it")
    assert file._positions is None  # nothing read yet
    assert str(error) == "p/pyproject.toml:3:22: bad; fix it"
    assert file._positions is not None
    written = Where(Path("/r/p/pyproject.toml"), 3, 22)
    assert where == written and hash(where) == hash(written)
    assert (where.line, where.col) == (3, 22)
    assert file.where(("nowhere",)) == Where(file.path, 1, 1)
    assert where != Where(file.path, 3, 23)
