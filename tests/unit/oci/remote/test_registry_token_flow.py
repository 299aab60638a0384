"""The bearer-token flow against a small token endpoint: scopes, refusals, anonymous
tokens and the OAuth2 refresh grant. The server: tests/unit/_fake_registry.py.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs

import pytest

from shipyard.oci.remote.registry import MEDIA_OCI_MANIFEST, AuthError
from tests.unit._fake_registry import (
    DIGEST,
    SECRET,
    FakeRegistry,
    Reply,
    Route,
    Seen,
    client,
    errors,
    fake,
    sleeps,
)

__all__ = ["fake", "sleeps"]  # fixtures the tests take, imported for pytest to find


def token_endpoint(fake: FakeRegistry, issued: dict[str, list[str]]) -> Callable[[Seen], Reply]:
    expected = "Basic " + base64.b64encode(f"ci:{SECRET}".encode()).decode()

    def answer(seen: Seen) -> Reply:
        if seen.headers.get("authorization") != expected:
            return 401, {"WWW-Authenticate": 'Basic realm="token"'}, errors("UNAUTHORIZED", "bad")
        token = f"token-{len(issued) + 1}"
        issued[token] = seen.query.get("scope", [])
        assert seen.query.get("service") == ["fake-registry"]
        return 200, {}, json.dumps({"token": token, "expires_in": 300}).encode()

    return answer


def protected(fake: FakeRegistry, issued: dict[str, list[str]], scope: str, ok: Reply) -> Route:
    def answer(seen: Seen) -> Reply:
        token = seen.headers.get("authorization", "").removeprefix("Bearer ")
        if scope in issued.get(token, []):
            return ok
        challenge = (
            f'Bearer realm="http://{fake.host}/token",service="fake-registry",scope="{scope}"'
        )
        return 401, {"WWW-Authenticate": challenge}, errors("UNAUTHORIZED", "authenticate")

    return answer


def test_bearer_token_flow_caches_tokens_per_scope(fake: FakeRegistry, sleeps: list[float]) -> None:
    issued: dict[str, list[str]] = {}
    fake.route("GET", "/token", token_endpoint(fake, issued))
    pull, push = "repository:app:pull", "repository:app:pull,push"
    fake.route("HEAD", f"/v2/app/blobs/{DIGEST}", protected(fake, issued, pull, (200, {}, b"")))
    other = "sha256:" + "b" * 64
    fake.route("HEAD", f"/v2/app/blobs/{other}", protected(fake, issued, pull, (404, {}, b"")))
    fake.route("PUT", "/v2/app/manifests/v1", protected(fake, issued, push, (201, {}, b"")))
    env = {"SHIPYARD_REGISTRY_USER": "ci", "SHIPYARD_REGISTRY_PASSWORD": SECRET}
    registry, _ = client(fake, sleeps, environ=env)

    assert registry.blob_exists("app", DIGEST) is True
    assert registry.blob_exists("app", other) is False
    registry.put_manifest("app", "v1", b"{}", MEDIA_OCI_MANIFEST)

    assert issued == {"token-1": [pull], "token-2": [push]}
    assert fake.count("GET", "/token") == 2, "the pull token was reused"
    assert fake.count("HEAD", f"/v2/app/blobs/{DIGEST}") == 2  # 401, then with the token
    assert fake.count("HEAD", f"/v2/app/blobs/{other}") == 1  # the token sent up front
    assert fake.count("PUT", "/v2/app/manifests/v1") == 1
    assert all(SECRET not in str(s.headers) for s in fake.seen if s.path != "/token")


def test_bearer_with_a_wrong_password_is_an_auth_error(
    fake: FakeRegistry, sleeps: list[float]
) -> None:
    issued: dict[str, list[str]] = {}
    fake.route("GET", "/token", token_endpoint(fake, issued))
    fake.route("GET", "/v2/", protected(fake, issued, "", (200, {}, b"{}")))
    wrong = "wrong-" + SECRET
    env = {"SHIPYARD_REGISTRY_USER": "ci", "SHIPYARD_REGISTRY_PASSWORD": wrong}
    registry, _ = client(fake, sleeps, environ=env)
    with pytest.raises(AuthError) as caught:
        registry.ping()
    message = str(caught.value)
    assert caught.value.exit_code == 2
    assert wrong not in message and SECRET not in message
    assert "rejected the credentials from $SHIPYARD_REGISTRY_USER" in message
    assert f"docker login {fake.host}" in message
    assert issued == {}
    assert sleeps == [], "authentication failures are not retried"


def test_anonymous_token_when_there_are_no_credentials(
    fake: FakeRegistry, sleeps: list[float]
) -> None:
    issued: dict[str, list[str]] = {}

    def anonymous(seen: Seen) -> Reply:
        assert "authorization" not in seen.headers
        issued["anon"] = seen.query.get("scope", [])
        return 200, {}, b'{"access_token": "anon"}'

    fake.route("GET", "/token", anonymous)
    pull = "repository:library/app:pull"
    ok = (200, {"Content-Type": MEDIA_OCI_MANIFEST}, b"{}")
    fake.route("GET", "/v2/library/app/manifests/1", protected(fake, issued, pull, ok))
    registry, _ = client(fake, sleeps)
    assert registry.get_manifest("library/app", "1")[0] == b"{}"
    assert issued == {"anon": [pull]}


def test_identity_token_is_exchanged_with_an_oauth2_refresh_grant(
    fake: FakeRegistry, sleeps: list[float], tmp_path: Path
) -> None:
    issued: dict[str, list[str]] = {}

    def oauth(seen: Seen) -> Reply:
        form = parse_qs(seen.body.decode())
        assert "authorization" not in seen.headers
        assert form["grant_type"] == ["refresh_token"]
        assert form["refresh_token"] == ["identity-xyz"]
        assert form["service"] == ["fake-registry"] and form["client_id"] == ["shipyard"]
        issued["oauth"] = form["scope"]
        return 200, {}, b'{"access_token": "oauth", "expires_in": 120}'

    fake.route("POST", "/token", oauth)
    path = f"/v2/app/blobs/{DIGEST}"
    fake.route("HEAD", path, protected(fake, issued, "repository:app:pull", (200, {}, b"")))
    config = {"auths": {fake.host: {"identitytoken": "identity-xyz"}}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    registry, _ = client(fake, sleeps, environ={"DOCKER_CONFIG": str(tmp_path)})
    assert registry.blob_exists("app", DIGEST)
    assert issued == {"oauth": ["repository:app:pull"]}
    assert fake.count("HEAD", path) == 2
