"""shipyard.workspace._text: positions of keys and values in pyproject.toml files."""

from __future__ import annotations

from shipyard.workspace._text import Positions


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
