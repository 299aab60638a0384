"""shipyard._environ: one row per variable, families matched by pattern."""

from __future__ import annotations

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
