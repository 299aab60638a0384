"""shipyard._toml reads with compiled tomli when it can, and answers exactly as tomllib."""

from __future__ import annotations

import tomllib

import pytest
import tomli

from shipyard import _toml

DOCUMENT = """
version = 1
requires-python = ">=3.11"

[[package]]
name = "demo"
version = "1.0"
source = { editable = "." }
dependencies = [{ name = "attrs", marker = "python_full_version >= '3.11'" }]
wheels = [{ url = "https://files.example/demo.whl", hash = "sha256:00", size = 12 }]

[package.metadata]
requires-dist = [{ name = "attrs", specifier = ">=22" }]
when = 1979-05-27T07:32:00Z
ratio = 0.5
"""


def test_the_compiled_parser_is_used_when_installed() -> None:
    compiled = not tomli._parser.__file__.endswith(".py")
    assert (_toml._parse is tomli.loads) is compiled


def test_values_are_the_ones_tomllib_reads() -> None:
    assert _toml.loads(DOCUMENT) == tomllib.loads(DOCUMENT)


@pytest.mark.parametrize("text", ["x = [1,", "a = 1\na = 2", "[t]\nk = 'unterminated"])
def test_errors_are_tomllib_errors_with_tomllib_words(text: str) -> None:
    with pytest.raises(tomllib.TOMLDecodeError) as ours:
        _toml.loads(text)
    with pytest.raises(tomllib.TOMLDecodeError) as theirs:
        tomllib.loads(text)
    assert type(ours.value) is tomllib.TOMLDecodeError
    assert str(ours.value).rsplit("(", 1)[1] == str(theirs.value).rsplit("(", 1)[1]  # the place
