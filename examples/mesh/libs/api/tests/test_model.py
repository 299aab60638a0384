"""mesh-api's service records and the validation rules server and client share."""

import pytest
from meshapi import (
    SERVICES_PATH,
    InvalidServiceError,
    Service,
    service_path,
    validate_address,
    validate_name,
)


@pytest.mark.parametrize("name", ["a", "web", "api-v2", "0x1", "a" * 63])
def test_dns_labels_are_valid_names(name: str) -> None:
    assert validate_name(name) == name


@pytest.mark.parametrize("name", ["", "Web", "-web", "web-", "a/b", "a.b", "a" * 64, "we b"])
def test_other_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidServiceError, match="invalid service name"):
        validate_name(name)


@pytest.mark.parametrize(
    ("address", "error"),
    [
        ("", "'address' must be a non-empty string"),
        (None, "'address' must be a non-empty string"),
        (8080, "'address' must be a non-empty string"),
        ("10.0.0.7 :80", "invalid address"),
        ("10.0.0.7:80\n", "invalid address"),
        ("x" * 260, "invalid address"),
    ],
)
def test_bad_addresses_are_refused(address: object, error: str) -> None:
    with pytest.raises(InvalidServiceError, match=error):
        validate_address(address)
    assert validate_address("x" * 259) == "x" * 259


def test_service_path_quotes_every_character() -> None:
    assert service_path("web") == f"{SERVICES_PATH}/web"
    assert service_path("a/b c") == "/v1/services/a%2Fb%20c"


def test_service_json_round_trip_and_shape_check() -> None:
    service = Service.checked("web", "10.0.0.7:8080")
    assert service.to_json() == {"name": "web", "address": "10.0.0.7:8080"}
    assert Service.from_json(service.to_json()) == service
    for bad in ({"name": "web"}, {"name": "web", "address": 80}, ["web", "10.0.0.7:80"]):
        with pytest.raises(InvalidServiceError, match="not a service record"):
            Service.from_json(bad)
