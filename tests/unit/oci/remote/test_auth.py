"""Registry credentials (environment, config.json, credential helpers) and challenges."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest

from shipyard.errors import UsageError
from shipyard.oci.remote.auth import (
    Authenticator,
    Challenge,
    Credentials,
    docker_config_path,
    env_variable_names,
    find_credentials,
    parse_challenges,
    parse_token_response,
)

HOST = "127.0.0.1:5000"
SECRET = "pa55:word-with-colon"


def write_config(folder: Path, config: object) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return {"DOCKER_CONFIG": str(folder), "PATH": str(folder / "bin")}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def fake_helper(env: dict[str, str], name: str, script: str) -> Path:
    """A docker-credential-<name> program in env's PATH that runs `script` (Python)."""
    folder = Path(env["PATH"])
    folder.mkdir(parents=True, exist_ok=True)
    program = folder / f"docker-credential-{name}"
    program.write_text(f"#!{sys.executable}\nimport json, sys\n{script}\n", encoding="utf-8")
    program.chmod(0o755)
    return program


def test_repr_and_str_hide_the_secret() -> None:
    creds = Credentials("alice", SECRET, identity_token="tok-123", source="$X")
    for text in (repr(creds), str(creds), f"{creds}", repr([creds])):
        assert SECRET not in text and "tok-123" not in text and "alice" not in text
        assert "<redacted>" in text and "$X" in text


def test_environment_per_host_wins_over_global_and_config(tmp_path: Path) -> None:
    env = write_config(tmp_path, {"auths": {HOST: {"auth": b64("cfg:cfgpass")}}})
    user_var, password_var = env_variable_names(HOST)
    assert (user_var, password_var) == (
        "SHIPYARD_REGISTRY_127_0_0_1_5000_USER",
        "SHIPYARD_REGISTRY_127_0_0_1_5000_PASSWORD",
    )
    env.update(
        {
            user_var: "host-user",
            password_var: "host-pass",
            "SHIPYARD_REGISTRY_USER": "any",
            "SHIPYARD_REGISTRY_PASSWORD": "any-pass",
        }
    )
    found = find_credentials(HOST, environ=env)
    assert found is not None
    assert (found.username, found.password) == ("host-user", "host-pass")
    assert found.source == f"${user_var} and ${password_var}"

    del env[user_var], env[password_var]
    found = find_credentials(HOST, environ=env)
    assert found is not None and (found.username, found.password) == ("any", "any-pass")

    del env["SHIPYARD_REGISTRY_USER"], env["SHIPYARD_REGISTRY_PASSWORD"]
    found = find_credentials(HOST, environ=env)
    assert found is not None and (found.username, found.password) == ("cfg", "cfgpass")


def test_half_set_environment_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="SHIPYARD_REGISTRY_PASSWORD is not set") as caught:
        find_credentials(HOST, environ={"SHIPYARD_REGISTRY_USER": "bob"})
    assert "bob" not in str(caught.value)


@pytest.mark.parametrize(
    "key", [HOST, f"https://{HOST}", f"http://{HOST}/v2/", f"https://{HOST}/v1/"]
)
def test_auths_base64_matches_any_docker_key_form(tmp_path: Path, key: str) -> None:
    env = write_config(tmp_path, {"auths": {key: {"auth": b64(f"bob:{SECRET}")}}})
    found = find_credentials(HOST, environ=env)
    assert found is not None
    assert (found.username, found.password) == ("bob", SECRET)
    assert str(tmp_path / "config.json") in found.source
    assert find_credentials("127.0.0.1:5001", environ=env) is None


def test_auths_username_password_and_identity_token(tmp_path: Path) -> None:
    env = write_config(
        tmp_path,
        {
            "auths": {
                HOST: {"username": "carol", "password": "pw"},
                "localhost:5000": {"identitytoken": "refresh-me"},
                "empty.test": {},
            }
        },
    )
    found = find_credentials(HOST, environ=env)
    assert found is not None and (found.username, found.password) == ("carol", "pw")
    token = find_credentials("localhost:5000", environ=env)
    assert token is not None and token.identity_token == "refresh-me"
    assert find_credentials("empty.test", environ=env) is None


def test_broken_auth_entries_are_named_without_their_value(tmp_path: Path) -> None:
    env = write_config(tmp_path, {"auths": {HOST: {"auth": "%%%not-base64%%%"}}})
    with pytest.raises(UsageError, match=r"auths\['127.0.0.1:5000'\]\.auth is not base64") as e:
        find_credentials(HOST, environ=env)
    assert "not-base64" not in str(e.value)

    env = write_config(tmp_path, {"auths": {HOST: {"auth": b64("no-colon-secret")}}})
    with pytest.raises(UsageError, match="does not decode to 'user:password'") as e:
        find_credentials(HOST, environ=env)
    assert "no-colon-secret" not in str(e.value)


def test_invalid_json_names_the_file_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{\n  "auths": {,}\n}\n', encoding="utf-8")
    with pytest.raises(UsageError, match=r"config\.json:2:\d+: docker config is not valid JSON"):
        find_credentials(HOST, environ={"DOCKER_CONFIG": str(tmp_path)})


def test_missing_config_means_no_credentials(tmp_path: Path) -> None:
    assert find_credentials(HOST, environ={"DOCKER_CONFIG": str(tmp_path / "none")}) is None


def test_config_path_follows_docker_config_then_home(tmp_path: Path) -> None:
    assert docker_config_path({"DOCKER_CONFIG": "/x"}) == Path("/x/config.json")
    assert docker_config_path({"HOME": str(tmp_path)}) == tmp_path / ".docker" / "config.json"


def test_cred_helper_gets_the_server_on_stdin(tmp_path: Path) -> None:
    env = write_config(tmp_path, {"credHelpers": {HOST: "fake"}, "auths": {HOST: {}}})
    seen = tmp_path / "seen"
    fake_helper(
        env,
        "fake",
        f"assert sys.argv[1:] == ['get']\n"
        f"open({str(seen)!r}, 'w').write(sys.stdin.read())\n"
        f"print(json.dumps({{'ServerURL': 'x', 'Username': 'helper-user', 'Secret': {SECRET!r}}}))",
    )
    found = find_credentials(HOST, environ=env)
    assert found is not None
    assert (found.username, found.password) == ("helper-user", SECRET)
    assert "docker-credential-fake" in found.source
    assert seen.read_text() == HOST


def test_creds_store_token_and_not_found(tmp_path: Path) -> None:
    env = write_config(tmp_path, {"credsStore": "store"})
    fake_helper(
        env, "store", "print(json.dumps({'Username': '<token>', 'Secret': 'identity-xyz'}))"
    )
    found = find_credentials(HOST, environ=env)
    assert found is not None and found.identity_token == "identity-xyz"

    fake_helper(env, "store", "print('credentials not found in native keychain'); sys.exit(1)")
    assert find_credentials(HOST, environ=env) is None

    fake_helper(env, "store", "sys.stderr.write('keyring locked\\n'); sys.exit(3)")
    with pytest.raises(UsageError, match="exited 3: keyring locked"):
        find_credentials(HOST, environ=env)


def test_missing_or_odd_helper_is_a_usage_error(tmp_path: Path) -> None:
    env = write_config(tmp_path, {"credHelpers": {HOST: "absent"}})
    with pytest.raises(UsageError, match="docker-credential-absent, which is not on PATH"):
        find_credentials(HOST, environ=env)
    env = write_config(tmp_path, {"credHelpers": {HOST: "../../bin/sh"}})
    with pytest.raises(UsageError, match="is not a credential helper name"):
        find_credentials(HOST, environ=env)


def test_helper_printing_garbage_is_a_usage_error(tmp_path: Path) -> None:
    env = write_config(tmp_path, {"credHelpers": {HOST: "garbage"}})
    fake_helper(env, "garbage", "print('not json')")
    with pytest.raises(UsageError, match="did not print valid JSON"):
        find_credentials(HOST, environ=env)


def test_parse_bearer_and_basic_challenges() -> None:
    header = (
        'Bearer realm="http://127.0.0.1:9/token",service="reg",'
        'scope="repository:a/b:pull,push repository:c:pull",error="insufficient_scope"'
    )
    [bearer] = parse_challenges(header)
    assert bearer.scheme == "bearer"
    assert bearer.realm == "http://127.0.0.1:9/token"
    assert bearer.params["service"] == "reg"
    assert bearer.scopes == ("repository:a/b:pull,push", "repository:c:pull")

    basic, other = parse_challenges('Basic realm="say \\"hi\\"", Bearer realm=x, service=y')
    assert (basic.scheme, basic.realm) == ("basic", 'say "hi"')
    assert (other.scheme, other.realm, other.params["service"]) == ("bearer", "x", "y")
    assert parse_challenges("") == []


def test_parse_token_response() -> None:
    assert parse_token_response({"token": "t", "expires_in": 300}) == ("t", 300.0)
    assert parse_token_response({"access_token": "a"}) == ("a", 60.0)
    bad_answers: list[object] = [{}, [], {"token": ""}, {"token": 5}]
    for bad in bad_answers:
        with pytest.raises(ValueError, match="token"):
            parse_token_response(bad)


def test_authenticator_caches_tokens_per_scope_until_they_expire() -> None:
    now = [1000.0]
    fetched: list[tuple[str, ...]] = []

    def fetch(
        challenge: Challenge, scopes: tuple[str, ...], found: Credentials | None
    ) -> tuple[str, float]:
        assert found is not None and found.password == SECRET
        fetched.append(scopes)
        return f"token-{len(fetched)}", 60.0

    auth = Authenticator(
        HOST, Credentials("u", SECRET), fetch_token=fetch, clock=lambda: now[0], environ={}
    )
    assert auth.header(["repository:a:pull"]) is None, "nothing is sent before a challenge"
    header = 'Bearer realm="http://127.0.0.1:9/token",service="reg",scope="repository:a:pull"'
    assert auth.answer(header, ["repository:a:pull"]) == "Bearer token-1"
    assert auth.header(["repository:a:pull"]) == "Bearer token-1"
    assert auth.header(["repository:b:pull,push"]) == "Bearer token-2"
    assert fetched == [("repository:a:pull",), ("repository:b:pull,push",)]
    now[0] += 55  # past the lifetime less its safety margin
    assert auth.header(["repository:a:pull"]) == "Bearer token-3"


def test_authenticator_basic_needs_credentials(tmp_path: Path) -> None:
    def never(*_: object) -> tuple[str, float]:
        raise AssertionError("no token for basic")

    auth = Authenticator(HOST, fetch_token=never, environ={"DOCKER_CONFIG": str(tmp_path)})
    assert auth.answer('Basic realm="r"', []) is None
    creds = Authenticator(HOST, Credentials("u", SECRET), fetch_token=never)
    expected = "Basic " + b64(f"u:{SECRET}")
    assert creds.answer('Basic realm="r"', []) == expected
    assert creds.header([]) == expected
    assert creds.answer("Negotiate abc", []) is None
