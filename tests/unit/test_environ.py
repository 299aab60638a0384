"""shipyard._environ: one row per variable, families matched by pattern."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from shipyard import _environ
from shipyard._environ import VARIABLES, documented


def test_names_are_unique() -> None:
    names = [v.name for v in VARIABLES]
    assert len(names) == len(set(names))


def test_a_per_host_name_is_documented_by_its_family() -> None:
    row = documented("SHIPYARD_REGISTRY_127_0_0_1_5000_USER")
    assert row is not None and row.name == "SHIPYARD_REGISTRY_<HOST>_USER"
    ca = documented("SHIPYARD_REGISTRY_REGISTRY_EXAMPLE_443_CA_FILE")
    assert ca is not None and ca.name == "SHIPYARD_REGISTRY_<HOST>_CA_FILE"


def test_a_prefix_the_code_completes_is_documented_and_a_new_name_is_not() -> None:
    assert documented("SHIPYARD_REGISTRY_") is not None
    assert documented("SHIPYARD_NOT_A_THING") is None
    assert documented("SHIPYARD_HTTP_TIMEOUTX") is None


def test_the_readers_take_their_names_from_the_table() -> None:
    from shipyard._http.settings import TIMEOUT_VARIABLE
    from shipyard.release.keys import KEY_ENV, PASSWORD_ENV

    assert TIMEOUT_VARIABLE == _environ.HTTP_TIMEOUT.name == "SHIPYARD_HTTP_TIMEOUT"
    assert (
        _environ.SIGNING_KEY.name,
        _environ.SIGNING_KEY_PASSWORD.name,
    ) == (KEY_ENV, PASSWORD_ENV)
    assert _environ.DOCKER_NETWORK.default == "none"


def test_the_cache_and_registry_readers_take_their_names_from_the_table() -> None:
    from shipyard.engine.cache import endpoint, local, mode
    from shipyard.engine.cache.reapi import results
    from shipyard.oci.remote.auth import env_variable_names
    from shipyard.oci.remote.transport import ca_variable_name

    assert (endpoint.TOKEN_VARIABLE, endpoint.RETRIES_VARIABLE) == (
        "SHIPYARD_CACHE_TOKEN",
        "SHIPYARD_CACHE_RETRIES",
    )
    assert endpoint.CONNECT_TIMEOUT_VARIABLE == "SHIPYARD_CACHE_CONNECT_TIMEOUT"
    assert local.MAX_SIZE_ENV == "SHIPYARD_CACHE_MAX_SIZE"
    assert mode.MODE_VARIABLE == "SHIPYARD_CACHE_MODE"
    assert results.KEY_VARIABLE == "SHIPYARD_ACTION_KEY"
    assert env_variable_names("127.0.0.1:5000") == (
        "SHIPYARD_REGISTRY_127_0_0_1_5000_USER",
        "SHIPYARD_REGISTRY_127_0_0_1_5000_PASSWORD",
    )
    assert ca_variable_name("127.0.0.1:5000") == "SHIPYARD_REGISTRY_127_0_0_1_5000_CA_FILE"


# -- new code reads a variable through the table ----------------------------------

SRC = Path(__file__).resolve().parents[2] / "src" / "shipyard"
# Shipped inside every zipapp and importing nothing of shipyard: keeps its literals.
_STANDALONE = ("_environ.py", "builders/zipapp/_boot/")
# A whole `SHIPYARD_*` name that is not a variable, with the reason.
_NOT_VARIABLES = {
    ("oci/mediatypes.py", "SHIPYARD_ACTION"): "the __all__ entry of a media type constant",
}
_WHOLE_NAME = re.compile(r"SHIPYARD_[A-Z0-9_]*[A-Z0-9]")  # a prefix ends in `_`


def spelled_names(src: Path) -> list[str]:
    """`file: NAME` for every string literal (or keyword argument) under `src` that is
    a whole SHIPYARD_* name, outside the table and the standalone zipapp runtime."""
    found = []
    for path in sorted(src.rglob("*.py")):
        where = path.relative_to(src).as_posix()
        if where.startswith(_STANDALONE):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            elif isinstance(node, ast.keyword) and node.arg:
                text = node.arg
            else:
                continue
            if _WHOLE_NAME.fullmatch(text) and (where, text) not in _NOT_VARIABLES:
                found.append(f"{where}: {text}")
    return found


def test_no_module_spells_a_variable_name_the_table_holds() -> None:
    spelled = spelled_names(SRC)
    assert spelled == [], (
        f"read these through shipyard._environ (`<ROW>.name`, a row added if new): {spelled}"
    )


def test_the_guard_catches_a_literal_a_keyword_and_not_a_prefix(tmp_path: Path) -> None:
    (tmp_path / "reader.py").write_text(
        'import os\nos.environ.get("SHIPYARD_NEW")\ndict(SHIPYARD_OTHER="1")\n'
        'PREFIX = "SHIPYARD_"\nf"SHIPYARD_REGISTRY_{1}_USER"\n',
        encoding="utf-8",
    )
    (tmp_path / "_environ.py").write_text('X = "SHIPYARD_NEW"\n', encoding="utf-8")
    assert spelled_names(tmp_path) == ["reader.py: SHIPYARD_NEW", "reader.py: SHIPYARD_OTHER"]


def test_a_family_row_builds_the_name_for_one_host() -> None:
    assert _environ.REGISTRY_HOST_USER.member("127.0.0.1:5000") == (
        "SHIPYARD_REGISTRY_127_0_0_1_5000_USER"
    )
    assert _environ.REGISTRY_HOST_CA_FILE.member("registry.example:443") == (
        "SHIPYARD_REGISTRY_REGISTRY_EXAMPLE_443_CA_FILE"
    )
    with pytest.raises(ValueError, match="not a family"):
        _environ.REGISTRY_USER.member("127.0.0.1:5000")
