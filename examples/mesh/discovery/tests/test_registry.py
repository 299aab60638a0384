"""mesh-discovery's Registry: validation, replacement, removal and stable listings."""

import pytest
from meshdiscovery import InvalidServiceError, Registry, Service


def test_register_reports_whether_the_name_was_new() -> None:
    registry = Registry()
    assert registry.register("web", "10.0.0.7:80") == (Service("web", "10.0.0.7:80"), True)
    assert registry.register("web", "10.0.0.8:80") == (Service("web", "10.0.0.8:80"), False)
    assert registry.get("web") == Service("web", "10.0.0.8:80")


@pytest.mark.parametrize(("name", "address"), [("Web", "10.0.0.7:80"), ("web", "10.0.0.7 80")])
def test_invalid_records_are_refused_and_not_stored(name: str, address: str) -> None:
    registry = Registry()
    with pytest.raises(InvalidServiceError):
        registry.register(name, address)
    assert registry.services() == []


def test_deregister_removes_only_registered_names() -> None:
    registry = Registry()
    registry.register("web", "10.0.0.7:80")
    assert registry.deregister("web") is True
    assert registry.deregister("web") is False
    assert registry.get("web") is None


def test_services_are_listed_by_name() -> None:
    registry = Registry()
    for name in ("zeta", "alpha", "mid"):
        registry.register(name, f"{name}.mesh:80")
    assert [service.name for service in registry.services()] == ["alpha", "mid", "zeta"]
