"""Secrets never leave the environment: not in output, dist/, the cache, or an error.

A password per registry, an identity token, a decoy and unrelated secrets
(AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN, an index password) are planted in the
environment and in a DOCKER_CONFIG config.json, all random hex, and a release
signing key (PEM text in SHIPYARD_SIGNING_KEY). shipyard then
builds a zipapp and an image, pushes to a basic-auth and a token-auth registry
on loopback, fails to push with a wrong password and with an identity token
the token server refuses, and releases. Every byte it wrote or printed is
searched for every secret in plain text and in base64 at every alignment,
inside gzip layers, tarballs and zip archives too; so are the messages, reprs
and tracebacks of the errors the library raises.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from shipyard._http.retry import RetryPolicy
from shipyard.errors import ShipyardError, UsageError
from shipyard.oci.remote.auth import Credentials, env_variable_names, find_credentials, redact
from shipyard.oci.remote.registry import Registry
from shipyard.release.keys import KEY_ENV, PASSWORD_ENV, load_signing_key
from tests.integration._secrets import (
    NAMES,
    RUN,
    Scanner,
    World,
    b64,
    docker_config,
    error_texts,
    planted_world,
    run_shipyard,
)
from tests.integration.conftest import Services
from tests.integration.registries import USER, registry_binary
from tests.reliability import record

pytestmark = [pytest.mark.integration, pytest.mark.requires("registry", "base-layout")]


@pytest.fixture(scope="module")
def world(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    if registry_binary() is None:
        pytest.skip("docker-registry is not installed")
    with planted_world(tmp_path_factory.mktemp("secrets"), services.base_layout) as planted:
        yield planted


def _library_errors(world: World) -> list[tuple[str, BaseException | None]]:
    """Failures raised by the library with the planted secrets in play."""
    s = world.secrets
    repo = f"sec-{RUN}/hello"
    wrong_basic = {**world.env, env_variable_names(world.basic.host)[1]: s["wrong"]}
    wrong_token = {
        **world.env,
        "DOCKER_CONFIG": str(
            docker_config(
                world.folder / "docker-wrong",
                {world.token.host: {"auth": b64(f"{USER}:{s['wrong_token']}")}},
            )
        ),
    }
    identity = {
        **world.env,
        "DOCKER_CONFIG": str(
            docker_config(
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
                    docker_config(
                        world.folder / "d1", {world.token.host: {"auth": f"!{s['token']}!"}}
                    )
                )
            },
        ),
        "config.json auth without a colon": lambda: find_credentials(
            world.token.host,
            environ={
                "DOCKER_CONFIG": str(
                    docker_config(
                        world.folder / "d2", {world.token.host: {"auth": b64(s["token"])}}
                    )
                )
            },
        ),
        "credential helper failing after printing the secret": lambda: find_credentials(
            world.token.host, environ=_leaky_helper(world)
        ),
        "credentials as a URL password in the config key": lambda: _rejected_with_key(world),
        # The signing key in SHIPYARD_SIGNING_KEY, damaged or with a needless password.
        "signing key PEM with a damaged line": lambda: load_signing_key(
            None, environ={KEY_ENV: s.signing_pem.replace("\n", "\n!", 2)}
        ),
        "signing key PEM with a password it does not need": lambda: load_signing_key(
            None, environ={KEY_ENV: s.signing_pem, PASSWORD_ENV: "pw"}
        ),
        "signing key PEM pasted without its header": lambda: load_signing_key(
            None, environ={KEY_ENV: "".join(s.signing_pem.splitlines()[1:-1])}
        ),
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
    config = docker_config(world.folder / "d3", {})
    (config / "config.json").write_text(json.dumps({"credsStore": "leaky"}))
    return {"DOCKER_CONFIG": str(config), "PATH": f"{folder}:{os.environ.get('PATH', '')}"}


def _rejected_with_key(world: World) -> object:
    key = f"https://{USER}:{world.secrets['wrong']}@{world.basic.host}"
    config = docker_config(
        world.folder / "d4", {key: {"auth": b64(f"{USER}:{world.secrets['wrong']}")}}
    )
    return Registry(world.basic.host, environ={"DOCKER_CONFIG": str(config)}).get_manifest(
        f"sec-{RUN}/hello", "latest"
    )


@pytest.mark.reliability
def test_no_secret_reaches_output_dist_cache_or_errors(world: World) -> None:
    s = world.secrets
    wrong_token_config = docker_config(
        world.folder / "docker-push-wrong",
        {world.token.host: {"auth": b64(f"{USER}:{s['wrong_token']}")}},
    )
    identity_config = docker_config(
        world.folder / "docker-push-identity", {world.token.host: {"identitytoken": s["identity"]}}
    )
    basic_password_var = env_variable_names(world.basic.host)[1]
    runs = [
        ("build", run_shipyard(world, "build", f"--cache-dir={world.cache}"), 0),
        ("push", run_shipyard(world, "push"), 0),
        (
            "push, wrong basic password",
            run_shipyard(world, "push", **{basic_password_var: s["wrong"]}),
            2,
        ),
        (
            "push, wrong token password",
            run_shipyard(world, "push", DOCKER_CONFIG=str(wrong_token_config)),
            2,
        ),
        (
            "push, refused identity token",
            run_shipyard(world, "push", DOCKER_CONFIG=str(identity_config)),
            None,
        ),
        (
            "release",
            run_shipyard(world, "release", "--version=1.0.0", f"--cache-dir={world.cache}"),
            0,
        ),
        (
            "release --snapshot",
            run_shipyard(world, "release", "--snapshot", f"--cache-dir={world.cache}"),
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
    header = "Basic " + b64(f"{USER}:{s['token']}")
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
        for kind, text in error_texts(exc):
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
        "index password) and a signing key (PEM in SHIPYARD_SIGNING_KEY); "
        f"{len(runs)} CLI runs (build, push, 3 failing pushes, release, "
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
            shown = "\n".join(t for _, t in error_texts(exc))
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
