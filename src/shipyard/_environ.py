"""Every environment variable shipyard reads or sets, in one table: name, default, meaning.

The table is the documentation (the site's environment reference is generated from
it, and a test fails when a `SHIPYARD_*` name appears in src/ without a row here) and
the code's source of the names: a module reads `environ.get(HTTP_TIMEOUT.name)`
rather than spelling the name again (tests/unit/test_environ.py fails on a spelled
one), and builds a per-host name with `REGISTRY_HOST_USER.member(host)`. The zipapp
runtime (builders/zipapp/_boot) is shipped inside every zipapp and imports nothing of
shipyard, so it keeps its own literals; its rows here document them.

A name with `<HOST>` stands for a family: the registry's host and port upper-cased,
every other character turned into `_` (`127.0.0.1:5000` -> `127_0_0_1_5000`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ACTION_KEY",
    "CACHE_CA",
    "CACHE_CERT",
    "CACHE_CONNECT_TIMEOUT",
    "CACHE_DIR",
    "CACHE_HEADERS",
    "CACHE_KEY",
    "CACHE_MAX_SIZE",
    "CACHE_MODE",
    "CACHE_PASSWORD",
    "CACHE_RETRIES",
    "CACHE_TIMEOUT",
    "CACHE_TOKEN",
    "CACHE_USER",
    "DOCKER_NETWORK",
    "HTTP_TIMEOUT",
    "INDEX_CA_FILE",
    "INDEX_INSECURE",
    "INDEX_PASSWORD",
    "INDEX_SIMPLE_URL",
    "INDEX_URL",
    "INDEX_USER",
    "INSECURE_REGISTRIES",
    "PROJECT",
    "REGISTRY_HOST_CA_FILE",
    "REGISTRY_HOST_PASSWORD",
    "REGISTRY_HOST_USER",
    "REGISTRY_PASSWORD",
    "REGISTRY_USER",
    "SIGNING_KEY",
    "SIGNING_KEY_PASSWORD",
    "SOURCE_URL",
    "STAGE",
    "VARIABLES",
    "VERSION",
    "Variable",
    "documented",
]

# Who reads it: shipyard itself; a zipapp shipyard built, when it runs; a process
# shipyard starts (shipyard sets it); the project's own test suite and scripts.
Scope = Literal["shipyard", "zipapp", "set", "tests"]


@dataclass(frozen=True)
class Variable:
    """One environment variable: its name, its default (\"\" when unset means off or
    none), what it does, and where it is read (module paths under src/shipyard).
    Which ones are secrets kept from build steps is `shipyard.process.is_secret`'s call."""

    name: str
    default: str
    meaning: str
    read_in: tuple[str, ...]
    scope: Scope = "shipyard"

    def pattern(self) -> re.Pattern[str]:
        """The names this row covers: itself, or its family when it holds `<HOST>`."""
        parts = (re.escape(p) for p in self.name.split("<HOST>"))
        return re.compile("^" + "[A-Z0-9_]+".join(parts) + "$")

    def member(self, host: str) -> str:
        """The family's name for `host` (`host:port`): upper-cased, every other
        character `_` (`127.0.0.1:5000` -> `SHIPYARD_REGISTRY_127_0_0_1_5000_USER`)."""
        if "<HOST>" not in self.name:
            raise ValueError(f"{self.name} is not a family")
        return self.name.replace("<HOST>", re.sub(r"[^A-Z0-9]", "_", host.upper()))


def _v(
    name: str,
    default: str,
    meaning: str,
    *read_in: str,
    scope: Scope = "shipyard",
) -> Variable:
    return Variable(name, default, meaning, read_in, scope)


CACHE_DIR = _v(
    "SHIPYARD_CACHE_DIR",
    "the user cache folder (XDG): ~/.cache/shipyard",
    "The local action cache, base image blobs and build environments; --cache-dir wins.",
    "engine/cache/local.py",
    "cli/_args.py",
)
CACHE_MAX_SIZE = _v(
    "SHIPYARD_CACHE_MAX_SIZE",
    "512M",
    "The size a build prunes the local cache down to (bytes, or K/M/G/T); "
    "`shipyard cache prune --max-size` wins.",
    "engine/cache/local.py",
)
HTTP_TIMEOUT = _v(
    "SHIPYARD_HTTP_TIMEOUT",
    "10 s to connect, 120 s to read",
    "Seconds that bound both the connect and the read time-out of every registry "
    "and index request.",
    "_http/settings.py",
)
INSECURE_REGISTRIES = _v(
    "SHIPYARD_INSECURE_REGISTRIES",
    "",
    "Comma-separated registry hosts (host:port) reached over plain HTTP or without "
    "TLS verification; loopback hosts need no entry.",
    "oci/remote/transport.py",
)
DOCKER_NETWORK = _v(
    "SHIPYARD_DOCKER_NETWORK",
    "none",
    "The network of a Dockerfile build (image.dockerfile) on the Docker engine: "
    "none keeps the build offline; host or a network name lets it fetch.",
    "builders/image/dockerfile.py",
)
SOURCE_URL = _v(
    "SHIPYARD_SOURCE_URL",
    "the binary's folder, relative to the repository",
    "The image's org.opencontainers.image.source label (CI sets the repository's URL).",
    "builders/kinds.py",
)
INDEX_CA_FILE = _v(
    "SHIPYARD_INDEX_CA_FILE",
    "",
    "A PEM bundle of the CA that signed the package index's certificate.",
    "release/index.py",
)
INDEX_INSECURE = _v(
    "SHIPYARD_INDEX_INSECURE",
    "",
    "1: upload to a package index over plain HTTP or without TLS verification "
    "(loopback needs no setting).",
    "release/index.py",
)
SIGNING_KEY = _v(
    "SHIPYARD_SIGNING_KEY",
    "",
    "A PEM ECDSA P-256 private key (a path, or the PEM text) that signs releases "
    "and promotions; --signing-key wins. Never passed to build steps.",
    "release/keys.py",
)
SIGNING_KEY_PASSWORD = _v(
    "SHIPYARD_SIGNING_KEY_PASSWORD",
    "",
    "The password of an encrypted signing key.",
    "release/keys.py",
)

_CACHE_ENDPOINT = "engine/cache/endpoint.py"

CACHE_TOKEN = _v(
    "SHIPYARD_CACHE_TOKEN",
    "",
    "A remote cache's bearer token, sent as `authorization: Bearer TOKEN`.",
    _CACHE_ENDPOINT,
)
CACHE_HEADERS = _v(
    "SHIPYARD_CACHE_HEADERS",
    "",
    "Extra headers for a remote cache, NAME=VALUE,NAME=VALUE (an API key, say).",
    _CACHE_ENDPOINT,
)
CACHE_USER = _v(
    "SHIPYARD_CACHE_USER",
    "",
    "A remote cache's HTTP Basic user (with SHIPYARD_CACHE_PASSWORD).",
    _CACHE_ENDPOINT,
)
CACHE_PASSWORD = _v(
    "SHIPYARD_CACHE_PASSWORD",
    "",
    "A remote cache's HTTP Basic password.",
    _CACHE_ENDPOINT,
)
CACHE_CA = _v(
    "SHIPYARD_CACHE_CA",
    "the system's CAs",
    "PEM file: the CA that signed the remote cache server's certificate.",
    _CACHE_ENDPOINT,
)
CACHE_CERT = _v(
    "SHIPYARD_CACHE_CERT",
    "",
    "PEM file: a client certificate for the remote cache (mutual TLS).",
    _CACHE_ENDPOINT,
)
CACHE_KEY = _v(
    "SHIPYARD_CACHE_KEY",
    "",
    "PEM file: the client certificate's key.",
    _CACHE_ENDPOINT,
)
CACHE_CONNECT_TIMEOUT = _v(
    "SHIPYARD_CACHE_CONNECT_TIMEOUT",
    "5",
    "Seconds the remote cache calls before the server's first answer may take, their "
    "retries included: a server that never answers costs this, once per build.",
    _CACHE_ENDPOINT,
)
CACHE_TIMEOUT = _v(
    "SHIPYARD_CACHE_TIMEOUT",
    "30",
    "Seconds one remote cache call may wait for an answer once the server has answered.",
    _CACHE_ENDPOINT,
)
CACHE_RETRIES = _v(
    "SHIPYARD_CACHE_RETRIES",
    "2",
    "Further tries of a remote cache call that failed on the way (a miss is not retried).",
    _CACHE_ENDPOINT,
)
CACHE_MODE = _v(
    "SHIPYARD_CACHE_MODE",
    "read-write",
    "How a build uses the shared cache when `--cache-mode` is not given: read-write, "
    "read-only (pull requests: never written) or write-only (a warming job: never read).",
    "engine/cache/mode.py",
)
ACTION_KEY = _v(
    "SHIPYARD_ACTION_KEY",
    "",
    "Never read: the one variable of the Remote Execution API Command shipyard sends "
    "for an action, holding the action's key, so the Action's digest follows the key.",
    "engine/cache/reapi/results.py",
    scope="set",
)
REGISTRY_USER = _v(
    "SHIPYARD_REGISTRY_USER",
    "",
    "User for the registries shipyard pushes to (hubs, an oci:// cache); never sent "
    "to a registry it only pulls from. Falls back to docker's config.json.",
    "oci/remote/auth.py",
)
REGISTRY_PASSWORD = _v(
    "SHIPYARD_REGISTRY_PASSWORD",
    "",
    "Password or token for SHIPYARD_REGISTRY_USER.",
    "oci/remote/auth.py",
)
REGISTRY_HOST_USER = _v(
    "SHIPYARD_REGISTRY_<HOST>_USER",
    "",
    "User for one registry host (pushed to or pulled from); wins over the global pair.",
    "oci/remote/auth.py",
)
REGISTRY_HOST_PASSWORD = _v(
    "SHIPYARD_REGISTRY_<HOST>_PASSWORD",
    "",
    "Password for SHIPYARD_REGISTRY_<HOST>_USER.",
    "oci/remote/auth.py",
)
REGISTRY_HOST_CA_FILE = _v(
    "SHIPYARD_REGISTRY_<HOST>_CA_FILE",
    "docker's certs.d/<host>/ca.crt, else the system's CAs",
    "A PEM bundle of the CA that signed one registry host's certificate.",
    "oci/remote/transport.py",
)
INDEX_URL = _v(
    "SHIPYARD_INDEX_URL",
    "",
    "The package index wheels are uploaded to by release and promote; --index-url wins.",
    "release/index.py",
)
INDEX_USER = _v(
    "SHIPYARD_INDEX_USER",
    "",
    "The package index user (required with SHIPYARD_INDEX_URL).",
    "release/index.py",
)
INDEX_PASSWORD = _v(
    "SHIPYARD_INDEX_PASSWORD",
    "",
    "The package index password or token.",
    "release/index.py",
)
INDEX_SIMPLE_URL = _v(
    "SHIPYARD_INDEX_SIMPLE_URL",
    "derived from SHIPYARD_INDEX_URL",
    "The index's simple API, where verify reads the uploaded wheels back.",
    "release/index.py",
)
VERSION = _v(
    "SHIPYARD_VERSION",
    "the stamped version",
    "Set for every build step (a PEP 517 backend may read it as the version).",
    "builders/wheel.py",
    scope="set",
)
PROJECT = _v(
    "SHIPYARD_PROJECT",
    "",
    "Set for a test stage's command: the project it runs for.",
    "stages/_runner.py",
    scope="set",
)
STAGE = _v(
    "SHIPYARD_STAGE",
    "",
    "Set for a test stage's command: the stage's name (lint, unit, ...).",
    "stages/_runner.py",
    scope="set",
)

VARIABLES: tuple[Variable, ...] = (
    CACHE_DIR,
    CACHE_MAX_SIZE,
    CACHE_TOKEN,
    CACHE_HEADERS,
    CACHE_USER,
    CACHE_PASSWORD,
    CACHE_CA,
    CACHE_CERT,
    CACHE_KEY,
    CACHE_CONNECT_TIMEOUT,
    CACHE_TIMEOUT,
    CACHE_RETRIES,
    CACHE_MODE,
    ACTION_KEY,
    HTTP_TIMEOUT,
    REGISTRY_USER,
    REGISTRY_PASSWORD,
    REGISTRY_HOST_USER,
    REGISTRY_HOST_PASSWORD,
    REGISTRY_HOST_CA_FILE,
    INSECURE_REGISTRIES,
    DOCKER_NETWORK,
    SOURCE_URL,
    INDEX_URL,
    INDEX_USER,
    INDEX_PASSWORD,
    INDEX_SIMPLE_URL,
    INDEX_CA_FILE,
    INDEX_INSECURE,
    SIGNING_KEY,
    SIGNING_KEY_PASSWORD,
    _v(
        "SHIPYARD_ZIPAPP_ROOT",
        "$XDG_CACHE_HOME or ~/.cache (Linux), ~/Library/Caches (macOS), "
        "%LOCALAPPDATA% (Windows), in shipyard/zipapps",
        "Where a running zipapp unpacks its site; must be the user's own and not "
        "writable by others.",
        "builders/zipapp/_boot/trust.py",
        scope="zipapp",
    ),
    _v(
        "SHIPYARD_ZIPAPP_KEEP",
        "3",
        "How many builds of one binary a zipapp keeps unpacked (the newest by last use).",
        "builders/zipapp/_boot/cache.py",
        scope="zipapp",
    ),
    VERSION,
    PROJECT,
    STAGE,
    _v(
        "SHIPYARD_REQUIRE_SERVICES",
        "",
        "1: an integration test whose service is missing fails instead of skipping (CI).",
        "tests/integration/conftest.py",
        scope="tests",
    ),
    _v(
        "SHIPYARD_REGISTRY",
        "127.0.0.1:5000",
        "The test registry scripts/services.sh started.",
        "tests/integration/conftest.py",
        scope="tests",
    ),
    _v(
        "SHIPYARD_BASE_IMAGE",
        "127.0.0.1:5000/shipyard/python-base:3.11",
        "The base image the integration tests build on.",
        "tests/integration/conftest.py",
        scope="tests",
    ),
    _v(
        "SHIPYARD_BASE_LAYOUT",
        ".shipyard/base/python-3.11",
        "The same base image as an OCI layout folder.",
        "tests/integration/conftest.py",
        scope="tests",
    ),
    _v(
        "SHIPYARD_DEBIAN_SOURCES",
        "the machine's apt sources",
        "The apt sources file scripts/services.sh builds the base image from.",
        "scripts/services.sh",
        scope="tests",
    ),
    _v(
        "SHIPYARD_FUZZ_EXAMPLES",
        "10000 in nox -s fuzz",
        "How many manifests the property-based fuzzing generates.",
        "tests/fuzz",
        scope="tests",
    ),
    _v(
        "SHIPYARD_FAULT_SEEDS",
        "50 in nox -s reliability",
        "Fault seeds of the push and release runs through the fault proxy.",
        "tests",
        scope="tests",
    ),
    _v(
        "SHIPYARD_RELIABILITY_LOG",
        "",
        "Where reliability tests append their figures (nox -s reliability sets it).",
        "tests",
        scope="tests",
    ),
)


def documented(name: str) -> Variable | None:
    """The row that documents `name` (a family's row for a per-host name), or None.
    A prefix that code completes (`SHIPYARD_REGISTRY_`) is documented when a row's
    name starts with it."""
    for variable in VARIABLES:
        if variable.pattern().match(name):
            return variable
    if name.endswith("_"):
        return next((v for v in VARIABLES if v.name.startswith(name)), None)
    return None
