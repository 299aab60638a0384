"""Integration-test services: the Docker engine, the local registry, skopeo, QEMU.

`scripts/services.sh` starts them and writes `.shipyard/services.env`; the
environment overrides that file. A test that uses the `services` fixture needs
every component unless it names the ones it needs with
`@pytest.mark.requires("registry", ...)`. A missing component skips the test
with the reason, or fails it when SHIPYARD_REQUIRE_SERVICES=1 (CI).
"""

from __future__ import annotations

import functools
import ipaddress
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

REPO = Path(__file__).resolve().parents[2]
SERVICES_ENV = REPO / ".shipyard" / "services.env"
BINFMT_AARCH64 = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")

COMPONENTS = ("registry", "docker", "skopeo", "qemu-aarch64", "base-layout")
DEFAULTS = {
    "SHIPYARD_REGISTRY": "127.0.0.1:5000",
    "SHIPYARD_BASE_IMAGE": "127.0.0.1:5000/shipyard/python-base:3.11",
    "SHIPYARD_BASE_LAYOUT": str(REPO / ".shipyard" / "base" / "python-3.11"),
    "DOCKER_HOST": "unix:///var/run/docker.sock",
}
HINT = "start them with: bash scripts/services.sh"


@dataclass(frozen=True)
class Services:
    """Where the integration services are."""

    registry: str  # host:port, loopback only
    base_image: str  # multi-arch (linux/amd64 + linux/arm64) Python base image
    base_layout: Path  # the same image as an OCI image layout directory
    docker_host: str  # DOCKER_HOST of the engine

    @property
    def registry_url(self) -> str:
        return f"http://{self.registry}"


def require_services() -> bool:
    """True when a missing service must fail the test rather than skip it."""
    return os.environ.get("SHIPYARD_REQUIRE_SERVICES") == "1"


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines; blank lines and # comments are ignored."""
    values: dict[str, str] = {}
    if not path.is_file():
        return values
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip().strip("'\"")
    return values


def load_services() -> Services:
    """The environment, else .shipyard/services.env, else the script's defaults."""
    from_file = read_env_file(SERVICES_ENV)

    def get(key: str) -> str:
        return os.environ.get(key) or from_file.get(key) or DEFAULTS[key]

    return Services(
        registry=get("SHIPYARD_REGISTRY"),
        base_image=get("SHIPYARD_BASE_IMAGE"),
        base_layout=Path(get("SHIPYARD_BASE_LAYOUT")),
        docker_host=get("DOCKER_HOST"),
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _probe_registry(services: Services) -> str | None:
    host = urlsplit(services.registry_url).hostname or ""
    if not _is_loopback(host):
        return f"registry {services.registry} is not on loopback; tests only talk to 127.0.0.0/8"
    try:
        import requests
    except ImportError:
        return "python package 'requests' is not installed"
    url = f"{services.registry_url}/v2/"
    with requests.Session() as session:
        session.trust_env = False  # never through a proxy: loopback only
        try:
            response = session.get(url, timeout=5)
        except requests.RequestException as exc:
            return f"registry not answering at {url}: {exc}"
    if response.status_code != 200:
        return f"registry at {url} answered HTTP {response.status_code}, expected 200"
    return None


def _probe_docker(services: Services) -> str | None:
    scheme = urlsplit(services.docker_host).scheme
    host = urlsplit(services.docker_host).hostname or ""
    if scheme != "unix" and not _is_loopback(host):
        return f"DOCKER_HOST {services.docker_host} is neither a unix socket nor on loopback"
    try:
        import docker  # type: ignore[import-untyped, unused-ignore]
        import docker.errors  # type: ignore[import-untyped, unused-ignore]
    except ImportError:
        return "python package 'docker' is not installed"
    try:
        client = docker.DockerClient(base_url=services.docker_host, timeout=10)
        try:
            client.ping()
        finally:
            client.close()
    except docker.errors.DockerException as exc:
        return f"docker not answering at {services.docker_host}: {exc}"
    return None


def _probe_skopeo(services: Services) -> str | None:
    return None if shutil.which("skopeo") else "skopeo not found on PATH"


def _probe_qemu(services: Services) -> str | None:
    try:
        text = BINFMT_AARCH64.read_text(encoding="utf-8")
    except OSError:
        return (
            f"qemu-aarch64 binfmt not enabled: {BINFMT_AARCH64} missing "
            "(binfmt_misc not mounted or qemu-user-static not registered)"
        )
    lines = text.splitlines()
    if not lines or lines[0] != "enabled":
        return f"qemu-aarch64 binfmt not enabled: {BINFMT_AARCH64} says {lines[:1]}"
    flags = next((line for line in lines if line.startswith("flags:")), "flags:")
    if "F" not in flags.partition(":")[2]:
        return "qemu-aarch64 binfmt has no F (fix-binary) flag: it cannot run inside containers"
    return None


def _probe_layout(services: Services) -> str | None:
    layout = services.base_layout
    for name in ("oci-layout", "index.json"):
        if not (layout / name).is_file():
            return f"base image OCI layout missing: no {layout / name}"
    return None


PROBES = {
    "registry": _probe_registry,
    "docker": _probe_docker,
    "skopeo": _probe_skopeo,
    "qemu-aarch64": _probe_qemu,
    "base-layout": _probe_layout,
}


@functools.cache
def problem(services: Services, component: str) -> str | None:
    """Why COMPONENT is unusable, or None when it works (probed once per session)."""
    return PROBES[component](services)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "requires(*components): the services a test needs, among " + ", ".join(COMPONENTS),
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def services() -> Services:
    return load_services()


@pytest.fixture(autouse=True)
def _check_services(request: pytest.FixtureRequest) -> Iterator[None]:
    """Skip (or fail, under SHIPYARD_REQUIRE_SERVICES=1) when a needed service is missing."""
    if "services" in request.fixturenames:
        marker = request.node.get_closest_marker("requires")
        needed: tuple[str, ...] = tuple(marker.args) if marker else COMPONENTS
        unknown = sorted(set(needed) - set(COMPONENTS))
        if unknown:
            pytest.fail(f"unknown service component(s) {unknown}; known: {COMPONENTS}")
        found: Services = request.getfixturevalue("services")
        reasons = [r for c in needed if (r := problem(found, c)) is not None]
        if reasons:
            message = "; ".join(reasons) + f" ({HINT})"
            if require_services():
                pytest.fail(f"SHIPYARD_REQUIRE_SERVICES=1: {message}", pytrace=False)
            pytest.skip(message)
    yield
