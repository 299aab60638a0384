"""The manifest loader against the fixtures in tests/manifests/.

Every bad case is a folder holding `binaries.yaml` (plus any source folders it needs) and
`expect.json`:

    {"line": L, "column": C, "path": "binaries.app.source",   # the first problem
     "message_contains": "...", "hint_contains": "...",       # hint optional
     "schema_rejects": true | false | null,                   # see test_schema.py
     "env": {...},               # optional: the environment load_manifest sees (default {})
     "max_seconds": 0.5,         # optional: must fail within this time (bombs)
     "problems": [{"line": L, "column": C, "path": "...", "message_contains": "...",
                   "hint_contains": "..."}, ...],  # optional: every problem, in order
                                                   # (test_manifest_all_errors.py)
     "xfail": {"load" | "cli" | "fast" | "schema": "reason"}}  # optional: known loader bugs

`line`/`column` are null where the position is not part of the contract (bombs). Each case
is copied into a temporary folder with its own `.git`, so the case folder is the repository
root whatever the checkout around it looks like.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from shipyard.errors import Location, ManifestError, Problem
from shipyard.manifest import Image, Manifest, load_manifest

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
# How long a bomb case may run in a child process before the test gives up on it: several
# times what the alias bomb takes today (~3 s with interpreter start-up), so a loaded machine
# does not fail it; a bomb that outlives this has failed anyway.
BOMB_TIMEOUT = 10.0
CLI_TIMEOUT = 60.0


@dataclass(frozen=True)
class Expect:
    """One bad case's expect.json."""

    line: int | None
    column: int | None
    path: str
    message: str
    hint: str
    schema_rejects: bool | None
    env: dict[str, str] = field(default_factory=dict)
    max_seconds: float | None = None
    xfail: dict[str, str] = field(default_factory=dict)


def _expect(case: Path) -> Expect:
    raw: dict[str, Any] = json.loads((case / "expect.json").read_text(encoding="utf-8"))
    known = {
        "line",
        "column",
        "path",
        "message_contains",
        "hint_contains",
        "schema_rejects",
        "env",
        "max_seconds",
        "xfail",
        "problems",
    }
    assert set(raw) <= known, f"{case.name}/expect.json: unknown keys {set(raw) - known}"
    xfail = raw.get("xfail", {})
    assert set(xfail) <= {"load", "cli", "fast", "schema"}, f"{case.name}: xfail {xfail}"
    return Expect(
        line=raw["line"],
        column=raw["column"],
        path=raw["path"],
        message=raw["message_contains"],
        hint=raw.get("hint_contains", ""),
        schema_rejects=raw["schema_rejects"],
        env=dict(raw.get("env", {})),
        max_seconds=raw.get("max_seconds"),
        xfail=dict(xfail),
    )


BAD_CASES = sorted(p for p in MANIFESTS.iterdir() if p.is_dir() and not p.name.startswith("good-"))


def _params(kind: str, *, only_timed: bool = False) -> list[Any]:
    params = []
    for case in BAD_CASES:
        expect = _expect(case)
        if only_timed and expect.max_seconds is None:
            continue
        reason = expect.xfail.get(kind)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(case, marks=marks, id=case.name))
    return params


def _install(case: Path, tmp_path: Path) -> Path:
    """Copy a case folder into tmp_path as its own repository; return its binaries.yaml."""
    target = tmp_path / case.name
    shutil.copytree(case, target, ignore=shutil.ignore_patterns("expect.json"))
    (target / ".git").mkdir()
    return target / "binaries.yaml"


@dataclass(frozen=True)
class Seen:
    """The first problem a load reported, and how long the load took."""

    line: int
    column: int
    path: str
    message: str
    hint: str
    seconds: float


_CHILD = """
import json, sys, time
from pathlib import Path
from shipyard.errors import ManifestError
from shipyard.manifest import load_manifest
start = time.perf_counter()
try:
    load_manifest(Path(sys.argv[1]), json.loads(sys.argv[2]))
except ManifestError as exc:
    p = exc.problems[0]
    seen = {"line": p.location.line, "column": p.location.column, "path": p.path,
            "message": p.message, "hint": p.hint}
else:
    seen = None
print(json.dumps({"seconds": time.perf_counter() - start, "problem": seen}))
"""


def _load_in_child(manifest: Path, env: dict[str, str], timeout: float) -> Seen:
    """Load in a fresh interpreter, so a bomb that never ends can be stopped."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(manifest), json.dumps(env)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"load_manifest did not return within {timeout} s")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["problem"] is not None, "the manifest loaded without a problem"
    return Seen(seconds=answer["seconds"], **answer["problem"])


def _first_problem(manifest: Path, expect: Expect) -> Seen:
    if expect.max_seconds is not None:
        return _load_in_child(manifest, expect.env, BOMB_TIMEOUT)
    start = time.perf_counter()
    with pytest.raises(ManifestError) as info:
        load_manifest(manifest, expect.env)
    seconds = time.perf_counter() - start
    assert info.value.problems, "ManifestError without problems"
    for problem in info.value.problems:
        assert isinstance(problem, Problem)
        assert problem.location.file == manifest.resolve()
        assert problem.location.line >= 1
        assert problem.location.column >= 1
    first = info.value.problems[0]
    return Seen(
        first.location.line,
        first.location.column,
        first.path,
        first.message,
        first.hint,
        seconds,
    )


def test_enough_bad_cases() -> None:
    assert len(BAD_CASES) >= 18
    for case in BAD_CASES:
        assert (case / "binaries.yaml").is_file(), case
        _expect(case)


@pytest.mark.parametrize("case", _params("load"))
def test_load_reports_first_problem(case: Path, tmp_path: Path) -> None:
    expect = _expect(case)
    seen = _first_problem(_install(case, tmp_path), expect)
    if expect.line is not None:
        assert (seen.line, seen.column) == (expect.line, expect.column), seen
    assert seen.path == expect.path, seen
    assert expect.message in seen.message, seen
    assert expect.hint in seen.hint, seen


@pytest.mark.parametrize("case", _params("fast", only_timed=True))
def test_bomb_fails_fast(case: Path, tmp_path: Path) -> None:
    expect = _expect(case)
    assert expect.max_seconds is not None
    seen = _load_in_child(_install(case, tmp_path), expect.env, expect.max_seconds + 3)
    assert seen.seconds < expect.max_seconds, f"took {seen.seconds:.2f} s"
    assert expect.message in seen.message, seen


def _cli_env(extra: dict[str, str]) -> dict[str, str]:
    """A small, fixed environment: the case decides which variables are set."""
    keep = ("PATH", "HOME", "SYSTEMROOT", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env["PYTHONIOENCODING"] = "utf-8"
    return {**env, **extra}


def _shipyard(
    *args: str, cwd: Path, env: dict[str, str], timeout: float = CLI_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shipyard", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        timeout=timeout,
        check=False,
    )


@pytest.mark.parametrize("case", _params("cli"))
def test_cli_check_exits_2(case: Path, tmp_path: Path) -> None:
    expect = _expect(case)
    manifest = _install(case, tmp_path)
    timeout = CLI_TIMEOUT if expect.max_seconds is None else BOMB_TIMEOUT
    try:
        done = _shipyard(
            "check", "-f", str(manifest), cwd=tmp_path, env=_cli_env(expect.env), timeout=timeout
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"shipyard check did not exit within {timeout} s")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("shipyard: error: "), done.stderr
    if expect.line is None:
        where = re.escape(str(manifest.resolve())) + r":\d+:\d+: "
    else:
        where = re.escape(f"{manifest.resolve()}:{expect.line}:{expect.column}: ")
    if expect.path:
        where += re.escape(f"{expect.path}: ")
    lines = [line for line in done.stderr.splitlines() if re.search(where, line)]
    assert lines, f"no line matching {where!r} in:\n{done.stderr}"
    assert any(expect.message in line and expect.hint in line for line in lines), done.stderr


def test_cli_file_flag_before_subcommand(tmp_path: Path) -> None:
    manifest = _install(MANIFESTS / "good-minimal", tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _shipyard("-f", str(manifest), "check", cwd=elsewhere, env=_cli_env({}))
    assert done.returncode == 0, done.stderr
    assert str(manifest) in done.stdout


def test_cli_check_good_manifest(tmp_path: Path) -> None:
    manifest = _install(MANIFESTS / "good-groups-of-groups", tmp_path)
    done = _shipyard("check", "-f", str(manifest), cwd=tmp_path, env=_cli_env({}))
    assert done.returncode == 0, done.stderr
    assert "ok, 4 binaries" in done.stdout
    assert "Traceback" not in done.stderr


# ---- several problems at once ----------------------------------------------------------


def test_every_reference_problem_is_reported(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "app").mkdir()
    manifest = tmp_path / "binaries.yaml"
    manifest.write_text(
        "schema: 1\n"
        "project: {name: demo}\n"
        "groups:\n"
        "  a: [b, nope]\n"
        "  b: [a]\n"
        "binaries:\n"
        "  app: {source: app, entrypoint: 'app.main:main'}\n"
        "  out: {source: .., entrypoint: 'app.main:main'}\n",
        encoding="utf-8",
    )
    with pytest.raises(ManifestError) as info:
        load_manifest(manifest, {})
    found = {(p.path, p.location.line, p.location.column) for p in info.value.problems}
    assert found == {
        ("binaries.app.source", 7, 17),
        ("binaries.out.source", 8, 17),
        ("groups.b[0]", 5, 7),
        ("groups.a[1]", 4, 10),
    }


def test_every_unset_variable_is_reported(tmp_path: Path) -> None:
    manifest = tmp_path / "binaries.yaml"
    manifest.write_text(
        "schema: 1\n"
        "project: {name: demo, version: '${VERSION}'}\n"
        "defaults:\n"
        "  image:\n"
        "    hubs: ['${HUB}', x]\n"
        "    tags: [latest, '${TAG:-edge}', '${GIT_SHA}']\n"
        "binaries:\n"
        "  app: {source: ., entrypoint: 'app.main:main'}\n",
        encoding="utf-8",
    )
    with pytest.raises(ManifestError) as info:
        load_manifest(manifest, {"TAG": "v1"})
    found = [(p.path, p.message) for p in info.value.problems]
    # With the schema's and the source's problems, in file order (issue 18, item 9).
    assert found == [
        ("project.version", "environment variable VERSION is not set"),
        ("defaults.image.hubs[0]", "environment variable HUB is not set"),
        ("defaults.image.hubs[1]", "'x' is not allowed"),
        ("defaults.image.tags[2]", "environment variable GIT_SHA is not set"),
        ("binaries.app.source", "'.' has no pyproject.toml"),
    ]


def test_problem_text_names_file_line_column_path_and_hint() -> None:
    problem = Problem(
        Location(Path("/r/binaries.yaml"), 3, 7), "binaries.x.sorce", "unknown key 'sorce'", "h"
    )
    assert str(problem) == "/r/binaries.yaml:3:7: binaries.x.sorce: unknown key 'sorce' (h)"
    error = ManifestError([problem, Problem(Location(Path("f"), 1, 1), "", "m")])
    assert str(error) == f"{problem}\nf:1:1: m"
    assert error.exit_code == 2


# ---- good cases --------------------------------------------------------------------------


def _good(name: str, tmp_path: Path, env: dict[str, str] | None = None) -> Manifest:
    manifest = _install(MANIFESTS / name, tmp_path)
    loaded = load_manifest(manifest, {} if env is None else env)
    assert loaded.path == manifest.resolve()
    assert loaded.root == manifest.parent.resolve()
    return loaded


def test_good_minimal(tmp_path: Path) -> None:
    m = _good("good-minimal", tmp_path)
    assert (m.project.name, m.project.version, m.project.python) == ("demo", "git", "3.11")
    assert list(m.binaries) == ["app"]
    app = m.binaries["app"]
    assert app.name == "app"
    assert app.source == m.root / "app"
    assert app.entrypoint == "app.main:main"
    assert app.module == "app.main"
    assert app.outputs == ("wheel",)
    assert app.platforms == ("linux/amd64", "linux/arm64")
    assert app.host == ("linux", "darwin", "windows")
    assert app.image == Image(platforms=("linux/amd64", "linux/arm64"))
    assert app.smoke == ()
    assert dict(m.groups) == {"all": ("app",)}


def test_good_defaults_merged_under_binaries(tmp_path: Path) -> None:
    m = _good("good-defaults-merged", tmp_path)
    assert (m.project.name, m.project.version, m.project.python) == ("mesh", "1.4.0", "3.12")
    ctl, cni = m.binaries["meshctl"], m.binaries["mesh-cni"]
    assert ctl.source == m.root / "ctl"
    assert cni.source == m.root / "cni"

    # meshctl's own keys win, duplicates dropped in order; image dicts merge key by key.
    assert ctl.outputs == ("wheel", "zipapp", "image")
    assert ctl.platforms == ("linux/arm64",)
    assert ctl.host == ("linux", "darwin")
    assert ctl.smoke == ()
    assert ctl.image.base == "oci-layout:.shipyard/base/python-3.12"
    assert ctl.image.hubs == ("registry.example/mesh",)
    assert ctl.image.tags == ("edge",)
    assert ctl.image.user == "65532"
    assert ctl.image.workdir == "/srv"
    assert dict(ctl.image.env) == {"LOG_LEVEL": "info", "MODE": "debug", "EXTRA": "1"}
    assert dict(ctl.image.labels) == {"team": "mesh"}
    assert ctl.image.dockerfile is None

    # mesh-cni takes every default except host.
    assert cni.outputs == ("wheel", "zipapp")
    assert cni.platforms == ("linux/amd64", "linux/arm64")
    assert cni.host == ("linux",)
    assert cni.smoke == ("--version",)
    assert cni.image.tags == ("latest",)
    assert cni.image.workdir is None
    assert dict(cni.image.env) == {"LOG_LEVEL": "info", "MODE": "prod"}
    assert dict(cni.image.labels) == {"team": "mesh"}
    assert dict(m.groups) == {"all": ("mesh-cni", "meshctl")}


def test_good_env_vars_take_their_defaults(tmp_path: Path) -> None:
    m = _good("good-env-vars", tmp_path, env={})
    app = m.binaries["app"]
    assert m.project.version == "0.0.0.dev0"
    assert app.source == m.root / "app"
    assert app.image.base == "oci-layout:.shipyard/base/python-3.11"
    assert app.image.hubs == ("127.0.0.1:5000/demo", "mirror.example/demo")
    assert app.image.tags == ("latest",)
    assert app.image.labels["note"] == "cost-$5"


def test_good_env_vars_env_wins_over_default(tmp_path: Path) -> None:
    env = {
        "VERSION": "2.0.1",
        "BASE_IMAGE": "docker.io/library/python:3.11-slim",
        "HUB": "ghcr.io/acme",
        "MIRROR_PREFIX": "acme-",
        "TAG": "v2",
        "APP_DIR": "other",
    }
    m = _good("good-env-vars", tmp_path, env=env)
    app = m.binaries["app"]
    assert m.project.version == "2.0.1"
    assert app.source == m.root / "other"
    assert app.image.base == "docker.io/library/python:3.11-slim"
    assert app.image.hubs == ("ghcr.io/acme", "mirror.example/acme-demo")
    assert app.image.tags == ("v2",)
    assert app.image.labels["note"] == "cost-$5"


def test_good_env_vars_uses_os_environ_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TAG", "from-environ")
    for name in ("VERSION", "BASE_IMAGE", "HUB", "MIRROR_PREFIX", "APP_DIR"):
        monkeypatch.delenv(name, raising=False)
    manifest = _install(MANIFESTS / "good-env-vars", tmp_path)
    m = load_manifest(manifest)
    assert m.binaries["app"].image.tags[0] == "from-environ"
    assert m.binaries["app"].image.hubs[0] == "127.0.0.1:5000/demo"
    assert m.project.version == "0.0.0.dev0"


def test_good_groups_of_groups(tmp_path: Path) -> None:
    m = _good("good-groups-of-groups", tmp_path)
    assert dict(m.groups) == {
        "agent": ("mesh-agent",),
        "core": ("meshctl", "mesh-agent"),
        "standard": ("meshctl", "mesh-agent", "echo"),
        "everything": ("meshctl", "mesh-agent", "echo", "mesh-cni"),
        "linux-only": ("mesh-cni", "mesh-agent"),
        "all": ("echo", "mesh-agent", "mesh-cni", "meshctl"),
    }
    # Several binaries may share one source.
    assert {b.source for b in m.binaries.values()} == {m.root / "app"}


def test_good_merge_keys_override(tmp_path: Path) -> None:
    m = _good("good-merge-keys", tmp_path)
    debug = m.binaries["app-debug"]
    assert debug.entrypoint == "app.debug:main"
    assert debug.outputs == ("wheel", "zipapp")
    assert debug.source == m.root / "app"
    assert m.binaries["app"].entrypoint == "app.main:main"


def test_manifest_is_read_only(tmp_path: Path) -> None:
    m = _good("good-groups-of-groups", tmp_path)
    with pytest.raises(TypeError):
        m.binaries["x"] = m.binaries["echo"]  # type: ignore[index]
    with pytest.raises(TypeError):
        m.groups["x"] = ()  # type: ignore[index]
