"""Secrets never leave the environment: not in output, dist/, the cache, or an error.

A password per registry, an identity token, a decoy and unrelated secrets
(AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN, an index password) are planted in the
environment and in a DOCKER_CONFIG config.json, all random hex. shipyard then
builds a zipapp and an image, pushes to a basic-auth and a token-auth registry
on loopback, fails to push with a wrong password and with an identity token
the token server refuses, and releases. Every byte it wrote or printed is
searched for every secret in plain text and in base64 at every alignment,
inside gzip layers, tarballs and zip archives too; so are the messages, reprs
and tracebacks of the errors the library raises.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import secrets
import subprocess
import sys
import tarfile
import traceback
import uuid
import zipfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from shipyard._http.retry import RetryPolicy
from shipyard.errors import ShipyardError, UsageError
from shipyard.oci.remote.auth import Credentials, env_variable_names, find_credentials, redact
from shipyard.oci.remote.registry import Registry
from tests.integration.conftest import Services
from tests.integration.pypi import package_index
from tests.integration.registries import (
    USER,
    ExtraRegistry,
    TokenIssuer,
    registry_binary,
    running_registry,
    running_token_server,
    write_htpasswd,
)
from tests.reliability import record

pytestmark = [pytest.mark.integration, pytest.mark.requires("registry", "base-layout")]

RUN = uuid.uuid4().hex[:8]
NAMES = (
    "basic",  # the basic-auth registry's password, in SHIPYARD_REGISTRY_<HOST>_PASSWORD
    "token",  # the token registry's password, base64 in config.json auths[host].auth
    "identity",  # an identity token in config.json
    "decoy",  # config.json credentials for the basic registry, overridden by the environment
    "wrong",  # a wrong password, for a push that fails
    "wrong_token",  # a wrong token-registry password in another config.json
    "aws",  # AWS_SECRET_ACCESS_KEY, read by nothing
    "github",  # GITHUB_TOKEN
    "index",  # SHIPYARD_INDEX_PASSWORD, for the pypiserver the release uploads the wheel to
)


@dataclass(frozen=True)
class Secrets:
    """One random hex value per name, and every form a leak of it could take."""

    values: Mapping[str, str] = field(
        default_factory=lambda: {n: f"{n}-{secrets.token_hex(20)}" for n in NAMES}
    )

    def __getitem__(self, name: str) -> str:
        return self.values[name]

    def forms(self) -> dict[bytes, str]:
        """Needle -> what it is: the text, and its base64 (standard and url-safe) at each
        of the three alignments, cut so it matches inside any longer base64 stream."""
        found: dict[bytes, str] = {}
        for name, value in self.values.items():
            raw = value.encode()
            found[raw] = name
            for pad in range(3):
                for encode, kind in (
                    (base64.b64encode, "base64"),
                    (base64.urlsafe_b64encode, "b64url"),
                ):
                    encoded = encode(b"\0" * pad + raw)
                    # Drop what the padding bytes and the tail's grouping change.
                    cut = encoded[(pad * 4 + 2) // 3 + 1 : -4]
                    found[cut] = f"{name} ({kind}, offset {pad})"
        return found


@dataclass
class Scanner:
    """Searches bytes (and the archives inside them) for the secrets' forms."""

    forms: Mapping[bytes, str]
    leaks: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    scanned: int = 0
    bytes_scanned: int = 0

    def text(self, where: str, text: str) -> None:
        self.data(where, text.encode(errors="surrogateescape"))

    def data(self, where: str, data: bytes, depth: int = 0) -> None:
        digest = hashlib.sha256(data).hexdigest()
        if digest in self.seen:
            return
        self.seen.add(digest)
        self.scanned += 1
        self.bytes_scanned += len(data)
        for needle, what in self.forms.items():
            if needle in data:
                self.leaks.append(f"{where}: {what}")
        if depth > 4:
            return
        for name, inner in _members(data):
            self.data(f"{where}!{name}", inner, depth + 1)

    def tree(self, folder: Path) -> int:
        count = 0
        for path in sorted(folder.rglob("*")) if folder.exists() else []:
            if path.is_file() and not path.is_symlink():
                self.data(str(path), path.read_bytes())
                count += 1
        return count


def _members(data: bytes) -> list[tuple[str, bytes]]:
    """The decompressed or archived contents of `data`: gzip, tar and zip."""
    found: list[tuple[str, bytes]] = []
    try:
        if data[:2] == b"\x1f\x8b":
            found.append(("(gunzip)", gzip.decompress(data)))
        elif len(data) > 262 and data[257:262] == b"ustar":
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
                for member in tar.getmembers():
                    handle = tar.extractfile(member) if member.isfile() else None
                    if handle is not None:
                        found.append((member.name, handle.read()))
        elif b"PK\x03\x04" in data[:4096] or data[:2] == b"#!":
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                found += [
                    (i.filename, archive.read(i)) for i in archive.infolist() if not i.is_dir()
                ]
    except (OSError, EOFError, tarfile.TarError, zipfile.BadZipFile):
        pass  # not an archive after all: its bytes were searched as they are
    return found


MANIFEST = """\
schema: 1
project: {name: vault, version: git, python: "3.11"}
binaries:
  hello:
    source: hello
    entrypoint: "hello:main"
    outputs: [wheel, zipapp, image]
    platforms: [linux/amd64]
    image:
      base: "oci-layout:${BASE_LAYOUT}"
      hubs: ["${HUB_BASIC}", "${HUB_TOKEN}"]
      tags: [latest]
      env: {GREETING: hi}
"""


@dataclass(frozen=True)
class World:
    """The registries, the repository, the secrets and the environment a run gets."""

    basic: ExtraRegistry
    token: ExtraRegistry
    repo: Path
    cache: Path
    folder: Path
    secrets: Secrets
    env: dict[str, str]


def _config(folder: Path, auths: Mapping[str, Mapping[str, str]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"auths": auths}))
    return folder


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.fixture(scope="module")
def world(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    if registry_binary() is None:
        pytest.skip("docker-registry is not installed")
    planted = Secrets()
    folder = tmp_path_factory.mktemp("secrets")
    write_htpasswd(folder / "htpasswd", USER, planted["basic"])
    certs = folder / "certs"
    certs.mkdir()
    issuer = TokenIssuer(certs, USER, planted["token"])
    with ExitStack() as stack:
        basic = stack.enter_context(
            running_registry(folder / "basic", htpasswd=folder / "htpasswd")
        )
        realm = stack.enter_context(running_token_server(issuer))
        token = stack.enter_context(running_registry(folder / "token", token=(issuer, realm)))
        docker = _config(
            folder / "docker",
            {
                token.host: {"auth": _b64(f"{USER}:{planted['token']}")},
                f"http://{basic.host}": {"auth": _b64(f"decoy-user:{planted['decoy']}")},
                "elsewhere.invalid:5000": {"identitytoken": planted["identity"]},
            },
        )
        index = stack.enter_context(package_index(folder / "index", "uploader", planted["index"]))
        repo = _repo(folder / "repo")
        user_var, password_var = env_variable_names(basic.host)
        env = {
            **os.environ,
            "CI": "1",
            "DOCKER_CONFIG": str(docker),
            "SHIPYARD_CACHE_DIR": str(folder / "cache"),
            "BASE_LAYOUT": str(services.base_layout),
            "HUB_BASIC": f"{basic.host}/sec-{RUN}",
            "HUB_TOKEN": f"{token.host}/sec-{RUN}",
            user_var: USER,
            password_var: planted["basic"],
            "AWS_ACCESS_KEY_ID": "AKIASHIPYARDTEST",
            "AWS_SECRET_ACCESS_KEY": planted["aws"],
            "GITHUB_TOKEN": planted["github"],
            "SHIPYARD_INDEX_URL": index,
            "SHIPYARD_INDEX_USER": "uploader",
            "SHIPYARD_INDEX_PASSWORD": planted["index"],
        }
        yield World(basic, token, repo, folder / "cache", folder, planted, env)


def _repo(repo: Path) -> Path:
    (repo / "hello" / "hello").mkdir(parents=True)
    (repo / "hello" / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
        '[project]\nname = "hello"\ndynamic = ["version"]\nrequires-python = ">=3.11"\n\n'
        '[tool.hatch.version]\nsource = "code"\npath = "version_stamp.py"\n'
    )
    (repo / "hello" / "version_stamp.py").write_text(
        'import os\n\n__version__ = os.environ.get("SHIPYARD_VERSION", "0.0.0")\n'
    )
    (repo / "hello" / "hello" / "__init__.py").write_text(
        "import os\n\ndef main():\n    print('hello', os.environ.get('GREETING'))\n    return 0\n"
    )
    (repo / "binaries.yaml").write_text(MANIFEST)
    (repo / ".gitignore").write_text("/dist/\n")
    git = ["git", "-C", str(repo), "-c", "user.email=t@t.invalid", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "hello"], check=True)
    return repo


def _shipyard(world: World, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shipyard", *args],
        cwd=world.repo,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={**world.env, **extra},
    )


def _error_texts(exc: BaseException) -> list[tuple[str, str]]:
    """Everything an error shows: str, repr, args, attributes and the full traceback."""
    shown = [
        ("str", str(exc)),
        ("repr", repr(exc)),
        ("args", repr(exc.args)),
        ("attributes", repr(vars(exc))),
        ("traceback", "".join(traceback.format_exception(exc))),
    ]
    cause = exc.__cause__ or exc.__context__
    depth = 0
    while cause is not None and depth < 8:
        shown += [("cause str", str(cause)), ("cause repr", repr(cause))]
        shown.append(("cause attributes", repr(getattr(cause, "__dict__", {}))))
        cause = cause.__cause__ or cause.__context__
        depth += 1
    return shown


def _library_errors(world: World) -> list[tuple[str, BaseException | None]]:
    """Failures raised by the library with the planted secrets in play."""
    s = world.secrets
    repo = f"sec-{RUN}/hello"
    wrong_basic = {**world.env, env_variable_names(world.basic.host)[1]: s["wrong"]}
    wrong_token = {
        **world.env,
        "DOCKER_CONFIG": str(
            _config(
                world.folder / "docker-wrong",
                {world.token.host: {"auth": _b64(f"{USER}:{s['wrong_token']}")}},
            )
        ),
    }
    identity = {
        **world.env,
        "DOCKER_CONFIG": str(
            _config(
                world.folder / "docker-identity",
                {world.token.host: {"identitytoken": s["identity"]}},
            )
        ),
    }
    calls: dict[str, Callable[[], object]] = {
        "basic registry, wrong explicit password": lambda: Registry(
            world.basic.host, credentials=Credentials(USER, s["wrong"])
        ).get_manifest(repo, "latest"),
        "basic registry, wrong password from the environment": lambda: Registry(
            world.basic.host, environ=wrong_basic
        ).put_manifest(repo, "x", b"{}", "application/vnd.oci.image.manifest.v1+json"),
        "token registry, wrong password in config.json": lambda: Registry(
            world.token.host, environ=wrong_token
        ).get_manifest(repo, "latest"),
        "token registry, refused identity token": lambda: Registry(
            world.token.host, environ=identity
        ).get_manifest(repo, "latest"),
        "closed port with credentials": lambda: Registry(
            "127.0.0.1:9",
            credentials=Credentials(USER, s["basic"]),
            retry=RetryPolicy(attempts=2, base_delay=0.01),
        ).get_manifest(repo, "latest"),
        "config.json auth that is not base64": lambda: find_credentials(
            world.token.host,
            environ={
                "DOCKER_CONFIG": str(
                    _config(world.folder / "d1", {world.token.host: {"auth": f"!{s['token']}!"}})
                )
            },
        ),
        "config.json auth without a colon": lambda: find_credentials(
            world.token.host,
            environ={
                "DOCKER_CONFIG": str(
                    _config(world.folder / "d2", {world.token.host: {"auth": _b64(s["token"])}})
                )
            },
        ),
        "credential helper failing after printing the secret": lambda: find_credentials(
            world.token.host, environ=_leaky_helper(world)
        ),
        "credentials as a URL password in the config key": lambda: _rejected_with_key(world),
    }
    results: list[tuple[str, BaseException | None]] = []
    for name, call in calls.items():
        try:
            call()
        except (ShipyardError, UsageError) as exc:
            results.append((name, exc))
        else:
            results.append((name, None))
    return results


def _leaky_helper(world: World) -> dict[str, str]:
    folder = world.folder / "helper"
    folder.mkdir(exist_ok=True)
    script = folder / "docker-credential-leaky"
    answer = json.dumps(
        {"ServerURL": world.token.host, "Username": USER, "Secret": world.secrets["token"]}
    )
    script.write_text(f"#!/bin/sh\necho '{answer}'\necho '{answer}' >&2\nexit 1\n")
    script.chmod(0o755)
    config = _config(world.folder / "d3", {})
    (config / "config.json").write_text(json.dumps({"credsStore": "leaky"}))
    return {"DOCKER_CONFIG": str(config), "PATH": f"{folder}:{os.environ.get('PATH', '')}"}


def _rejected_with_key(world: World) -> object:
    key = f"https://{USER}:{world.secrets['wrong']}@{world.basic.host}"
    config = _config(world.folder / "d4", {key: {"auth": _b64(f"{USER}:{world.secrets['wrong']}")}})
    return Registry(world.basic.host, environ={"DOCKER_CONFIG": str(config)}).get_manifest(
        f"sec-{RUN}/hello", "latest"
    )


@pytest.mark.reliability
def test_no_secret_reaches_output_dist_cache_or_errors(world: World) -> None:
    s = world.secrets
    wrong_token_config = _config(
        world.folder / "docker-push-wrong",
        {world.token.host: {"auth": _b64(f"{USER}:{s['wrong_token']}")}},
    )
    identity_config = _config(
        world.folder / "docker-push-identity", {world.token.host: {"identitytoken": s["identity"]}}
    )
    basic_password_var = env_variable_names(world.basic.host)[1]
    runs = [
        ("build", _shipyard(world, "build", f"--cache-dir={world.cache}"), 0),
        ("push", _shipyard(world, "push"), 0),
        (
            "push, wrong basic password",
            _shipyard(world, "push", **{basic_password_var: s["wrong"]}),
            2,
        ),
        (
            "push, wrong token password",
            _shipyard(world, "push", DOCKER_CONFIG=str(wrong_token_config)),
            2,
        ),
        (
            "push, refused identity token",
            _shipyard(world, "push", DOCKER_CONFIG=str(identity_config)),
            None,
        ),
        (
            "release",
            _shipyard(world, "release", "--version=1.0.0", f"--cache-dir={world.cache}"),
            0,
        ),
        (
            "release --snapshot",
            _shipyard(world, "release", "--snapshot", f"--cache-dir={world.cache}"),
            0,
        ),
    ]
    problems = [
        f"{name}: exit {done.returncode}, expected {code}: {done.stderr[-1500:]}"
        for name, done, code in runs
        if (code is not None and done.returncode != code) or (code is None and done.returncode == 0)
    ]
    problems += [
        f"{name}: a traceback: {done.stderr[-1500:]}"
        for name, done, _ in runs
        if "Traceback" in done.stderr
    ]
    scanner = Scanner(s.forms())
    # The search's own eyes: a Basic header's base64 inside a zip in a tar in a gzip is seen.
    canary = Scanner(s.forms())
    header = "Basic " + _b64(f"{USER}:{s['token']}")
    canary.data("canary", gzip.compress(_tar_of_zip(header)))
    assert canary.leaks and all("token" in leak for leak in canary.leaks), canary.leaks
    for name, done, _ in runs:
        scanner.text(f"{name}: stdout", done.stdout)
        scanner.text(f"{name}: stderr", done.stderr)
    dist_files = scanner.tree(world.repo / "dist")
    cache_files = scanner.tree(world.cache)
    # What reached the registries is what shipyard sent.
    pushed_files = scanner.tree(world.basic.root / "data") + scanner.tree(world.token.root / "data")
    layers = sum(
        1 for p in (world.repo / "dist" / "images").rglob("*") if p.is_file() and _is_gzip(p)
    )
    errors = _library_errors(world)
    for name, exc in errors:
        if exc is None:
            problems.append(f"library: {name}: no error was raised")
            continue
        for kind, text in _error_texts(exc):
            scanner.text(f"library: {name}: {kind}", text)
    scanner.text(
        "Credentials repr", repr(Credentials(USER, s["basic"], identity_token=s["identity"]))
    )
    scanner.text("Credentials str", str(Credentials(USER, s["basic"])))
    assert dist_files > 10 and layers >= 3, (
        "the build wrote less than expected: nothing was searched"
    )
    record(
        "secrets in output, dist/, cache and errors",
        area="secrets",
        cases=len(runs) + len(errors),
        injected=f"{len(NAMES)} random secrets (registry passwords from the environment and "
        "from config.json, an identity token, a decoy, AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN, an "
        f"index password); {len(runs)} CLI runs (build, push, 3 failing pushes, release, "
        f"snapshot release) and {len(errors)} failing library calls",
        result=f"{len(scanner.leaks)} leaks in {scanner.scanned} distinct texts and files "
        f"({scanner.bytes_scanned >> 20} MiB, gzip layers, tarballs and zips opened): "
        f"{dist_files} files in dist/, {cache_files} in the cache, {pushed_files} in the "
        f"registries, {2 * len(runs)} output streams, {len(errors)} errors (str, repr, "
        "attributes, traceback)",
        figures={
            "cases": len(runs) + len(errors),
            "leaks": len(scanner.leaks),
            "files": dist_files + cache_files + pushed_files,
            "mib": scanner.bytes_scanned >> 20,
        },
    )
    assert not problems, "\n".join(problems)
    assert not scanner.leaks, "\n".join(scanner.leaks[:50])


def _tar_of_zip(text: str) -> bytes:
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("headers.txt", text * 3)
    outer = io.BytesIO()
    with tarfile.open(fileobj=outer, mode="w") as tar:
        info = tarfile.TarInfo("app.pyz")
        info.size = len(inner.getvalue())
        tar.addfile(info, io.BytesIO(inner.getvalue()))
    return outer.getvalue()


def _is_gzip(path: Path) -> bool:
    with path.open("rb") as handle:
        return handle.read(2) == b"\x1f\x8b"


@pytest.mark.reliability
def test_credentials_written_into_a_registry_host_are_not_echoed(world: World) -> None:
    password = world.secrets["wrong"]
    texts = [
        f"http://{USER}:{password}@{world.basic.host}",
        f"{USER}:{password}@{world.basic.host}",
        f"https://{USER}:{password}@{world.basic.host}/sec-{RUN}/hello",
    ]
    leaked: list[str] = []
    for text in texts:
        assert password not in redact(text)
        try:
            Registry(text).ping()
        except ShipyardError as exc:
            shown = "\n".join(t for _, t in _error_texts(exc))
            if password in shown:
                leaked.append(str(exc)[:200].replace(password, "<the password>"))
        else:
            leaked.append(f"{redact(text)!r}: accepted")
    record(
        "credentials in a registry host",
        area="secrets",
        cases=len(texts),
        injected="registry hosts written with user:password@ (as URLs and bare)",
        result=f"{len(texts) - len(leaked)}/{len(texts)} refused without echoing the password",
        figures={"cases": len(texts), "leaks": len(leaked)},
    )
    assert leaked == []
