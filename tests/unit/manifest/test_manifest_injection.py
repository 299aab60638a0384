"""Hostile values in the manifest stop at validation: exit 2, FILE:LINE:COL, no process.

Names, groups, tags, hubs, platforms, entry points, base images and the lock file a
binary names reach file names, registry URLs, image configs and pip. Each field gets
shell metacharacters, path traversal, newlines, control characters and strings that
break its own grammar; every command that reads the manifest must refuse each of
them with exit 2 and a located message before any process starts. The second half
reads the source: no call in src/shipyard can start a shell.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import io
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shipyard import cli
from tests.reliability import record
from tests.sealed import seal

SRC = Path(__file__).resolve().parents[3] / "src" / "shipyard"
HASH = "--hash=sha256:" + "0" * 64
GOOD_LOCK = f"click==8.1.7 {HASH}\n"

# Every command that reads the manifest; build and release would start processes
# if the manifest got through.
COMMANDS = (
    ("check",),
    ("plan", "--json"),
    ("build", "--dry-run", "--json"),
    ("build", "--no-cache"),
    ("push",),
    ("release", "--dry-run", "--allow-dirty"),
)

# Hostile in every field.
SHELL = (
    "x; rm -rf /",
    "$(id)",
    "`id`",
    "x && id",
    "x || id",
    "x | sh",
    "x > /tmp/pwned",
    "'; id; '",
    '"; id; "',
    "$HOME",
    "${IFS}id",
    "~root",
    "*",
    "x?",
    "{a,b}",
    "x#y",
    "../x",
    "../../../../etc/passwd",
    "/etc/passwd",
    "..",
    "x/../../y",
    "%2e%2e/x",
    "-rf",
    "--help",
    " x",
    "x ",
    "x\ny",
    "x\r",
    "x\ty",
    "x\x00y",
    "\x1b[31mred",
    "x\u2028y",
    "x\u202ey",
    "",
)
# Hostile for one field only (each would be fine, or refused the same way, elsewhere).
EXTRA = {
    "tag": ("a" * 129, "v1 beta", "v1;id", ".hidden", "-x", "v1/x", "v1:x", "v1@sha256"),
    "hub": (
        "https://ghcr.io/acme",
        "http://127.0.0.1:5000/x",
        "oci://ghcr.io/acme",
        "ghcr.io/acme corp",
        "ghcr.io/Acme",
        "ghcr.io/acme/",
        "ghcr.io//acme",
        "ghcr.io:99999/x",
        "ghcr.io:/x",
        "acme",
        "acme/x",
        "ghcr.io/acme;id",
        "ghcr.io/$(id)",
        "user@ghcr.io/x",
        "ghcr.io/x?y=1",
        "ghcr.io/" + "a" * 256,
    ),
    "platform": (
        "linux/amd64;id",
        "linux/amd64 ",
        "Linux/amd64",
        "linux/arm/v7/x",
        "linux",
        "../linux/amd64",
        "windows/amd64",
        "linux/mips",
    ),
    "binary": ("a" * 65, "App", "a_", "-a", "a-", "é"),
    "group": ("a" * 65, "Core", "all"),
    "base": ("https://ghcr.io/x/py:3.11", "python:3.11", "ghcr.io/x:bad tag", "ghcr.io/x@md5:0"),
    "requirement": (
        f"click==8.1.7 --global-option=--evil {HASH}",
        f"click==8.1.7 --config-settings=x=y {HASH}",
        "-r /etc/shadow",
        "-e .",
        "-c constraints.txt",
        "--extra-index-url http://evil.example --trusted-host evil.example",
        "--pre",
        "click @ file:///etc/passwd",
        f"click>=8 {HASH}",
        "click==8.1.7",
        "click==8.1.7 --hash=md5:abc",
        f"click==8.1.7; os_name == 'posix' and $(id) {HASH}",
    ),
}


def _yaml(value: str) -> str:
    """`value` as a YAML double-quoted scalar (JSON's escapes are YAML's)."""
    return json.dumps(value)


# Where each field's value goes: a manifest around it, with SLOT for the value.
MANIFEST = """\
schema: 1
project: {name: demo, version: "1.0"}
GROUPS
binaries:
  BINARY:
    source: app
    entrypoint: ENTRYPOINT
    outputs: [wheel, zipapp, image]
    platforms: [PLATFORM]
    requirements: locks/app.txt
    image: {base: BASE, hubs: [HUB], tags: [TAG]}
"""
HONEST = {
    "GROUPS": "groups: {core: [app]}",
    "BINARY": "app",
    "ENTRYPOINT": "app.main:main",
    "PLATFORM": "linux/amd64",
    "BASE": "oci-layout:base",
    "HUB": "127.0.0.1:5000/demo",
    "TAG": "latest",
}
FIELDS: dict[str, Callable[[str], dict[str, str]]] = {
    "binary": lambda v: {"BINARY": _yaml(v), "GROUPS": f"groups: {{core: [{_yaml(v)}]}}"},
    "group": lambda v: {"GROUPS": f"groups: {{{_yaml(v)}: [app]}}"},
    "group member": lambda v: {"GROUPS": f"groups: {{core: [app, {_yaml(v)}]}}"},
    "project name": lambda v: {"project: {name: demo": "project: {name: " + _yaml(v)},
    "entrypoint": lambda v: {"ENTRYPOINT": _yaml(v)},
    "platform": lambda v: {"PLATFORM": _yaml(v)},
    "tag": lambda v: {"TAG": _yaml(v)},
    "hub": lambda v: {"HUB": _yaml(v)},
    "base": lambda v: {"BASE": _yaml(v)},
    "requirement": lambda v: {},  # the value goes into the lock file
}
# Fields whose own extra list applies; the others take SHELL only.
EXTRA_FOR = {"group member": "binary", "project name": "binary"}


def _cases() -> list[Any]:
    cases = []
    for field in FIELDS:
        extra = EXTRA.get(EXTRA_FOR.get(field, field), ())
        for value in dict.fromkeys((*SHELL, *extra)):
            if field == "requirement" and not value:
                continue  # an empty lock file is honest: a program with no dependencies
            cases.append(pytest.param(field, value, id=f"{field}-{value[:40]!r}"))
    return cases


CASES = _cases()
_LOCATED = re.compile(r"^(/[^:\n]+):(\d+):(\d+): ", re.MULTILINE)


@pytest.fixture(scope="module")
def passed() -> Iterator[list[str]]:
    """The cases that held; one reliability record for all of them."""
    held: list[str] = []
    yield held
    if held:
        fields = sorted({case.split("\0")[0] for case in held})
        record(
            "hostile values in manifest fields",
            area="injection",
            cases=len(held),
            injected=f"{len(held)} hostile values (shell metacharacters, traversal, newlines, "
            f"control characters, grammar breakers) across {len(fields)} fields: "
            + ", ".join(fields),
            result=f"{len(held)} of {len(CASES)} cases exited 2 with a FILE:LINE:COL message "
            f"in each of {len(COMMANDS)} commands; 0 processes started",
            figures={"cases": len(held), "fields": len(fields), "commands": len(COMMANDS)},
        )


@pytest.fixture
def sealed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No process can start; a parser built once (main builds one per call)."""
    seal(monkeypatch)
    monkeypatch.setattr(cli, "parser", functools.cache(cli.parser))
    monkeypatch.setenv("SHIPYARD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("VERSION", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def honest(sealed: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """`sealed`, but git may answer questions about the repository."""
    seal(monkeypatch, git=True)


def _repository(root: Path, field: str, value: str) -> Path:
    (root / ".git").mkdir(parents=True)
    (root / "app").mkdir()
    (root / "app" / "pyproject.toml").write_text("[project]\nname = 'app'\n")
    (root / "locks").mkdir()
    lock = value + "\n" if field == "requirement" else GOOD_LOCK
    (root / "locks" / "app.txt").write_bytes(lock.encode("utf-8", "surrogatepass"))
    text = MANIFEST
    for slot, honest in {**HONEST, **FIELDS[field](value)}.items():
        text = text.replace(slot, honest)
    manifest = root / "binaries.yaml"
    manifest.write_text(text, encoding="utf-8")
    return manifest


def _run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, err.getvalue()


def test_the_honest_manifest_passes(tmp_path: Path, honest: None) -> None:
    """The template is valid, so each case below fails for its one hostile value."""
    manifest = _repository(tmp_path / "repo", "tag", "latest")
    assert _run(["-f", str(manifest), "check"]) == (0, "")
    assert _run(["-f", str(manifest), "plan", "--json"])[0] == 0


@pytest.mark.reliability
@pytest.mark.parametrize(("field", "value"), CASES)
def test_hostile_value_is_refused_before_any_process(
    field: str, value: str, tmp_path: Path, sealed: None, passed: list[str]
) -> None:
    manifest = _repository(tmp_path / "repo", field, value)
    lock = manifest.parent / "locks" / "app.txt"
    for command in COMMANDS:
        code, err = _run(["-f", str(manifest), *command])
        assert code == 2, f"{command}: exit {code}\n{err}"
        assert err.startswith("shipyard: error: "), err
        located = _LOCATED.search(err.removeprefix("shipyard: error: "))
        assert located, f"{command}: no FILE:LINE:COL in {err!r}"
        expected = lock if field == "requirement" else manifest
        assert Path(located.group(1)) == expected, err
        assert "\x1b" not in err and "\x00" not in err, f"raw control characters: {err!r}"
    passed.append(f"{field}\0{value}")


UV_LOCK = f"""\
# This file was autogenerated by uv via the following command:
#    uv pip compile --generate-hashes pyproject.toml -o locks/app.txt
--index-url https://index.example/simple

click==8.1.7 \\
    {HASH} \\
    {HASH.replace("0", "1")}
    # via app
colorama==0.4.6 ; sys_platform == 'win32' \\
    {HASH}
    # via click
tomli==2.0.1 ; python_version < "3.11" {HASH}  # a trailing comment
"""


def test_an_honest_lock_file_passes(tmp_path: Path, honest: None) -> None:
    manifest = _repository(tmp_path / "repo", "tag", "latest")
    (manifest.parent / "locks" / "app.txt").write_text(UV_LOCK)
    assert _run(["-f", str(manifest), "check"]) == (0, "")


def test_a_lock_file_changed_after_caching_is_read_again(tmp_path: Path, sealed: None) -> None:
    """The manifest cache skips validation for an unchanged manifest, not an unchanged lock."""
    from shipyard.errors import ManifestError
    from shipyard.manifest import load_manifest

    manifest = _repository(tmp_path / "repo", "tag", "latest")
    cache = tmp_path / "cache"
    load_manifest(manifest, {}, cache_dir=cache)
    assert list((cache / "manifests").glob("*.json")), "the first load is cached"
    lock = manifest.parent / "locks" / "app.txt"
    lock.write_text(f"click==8.1.7 --global-option=--evil {HASH}\n")
    with pytest.raises(ManifestError) as info:
        load_manifest(manifest, {}, cache_dir=cache)
    assert info.value.problems[0].location.file == lock


# ---- no shell in the source -----------------------------------------------------------

_SPAWNERS = {"run", "Popen", "call", "check_call", "check_output"}
_SHELLS = {
    ("os", "system"),
    ("os", "popen"),
    ("subprocess", "getoutput"),
    ("subprocess", "getstatusoutput"),
    ("asyncio", "create_subprocess_shell"),
}


def _dotted_call(node: ast.Call, aliases: dict[str, tuple[str, str]]) -> tuple[str, str] | None:
    func = node.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.value.id, func.attr
    if isinstance(func, ast.Name) and func.id in aliases:
        return aliases[func.id]
    return None


def _calls() -> Iterator[tuple[str, ast.Call, tuple[str, str]]]:
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        aliases = {
            alias.asname or alias.name: (node.module, alias.name)
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module in ("subprocess", "os")
            for alias in node.names
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = _dotted_call(node, aliases)
                if name is not None:
                    where = f"{path.relative_to(SRC.parent)}:{node.lineno}"
                    yield where, node, name


def _is_argument_list(node: ast.expr | None) -> bool:
    """A list or tuple display or comprehension, list(...)/tuple(...), or a name."""
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Name) and node.func.id in ("list", "tuple")
    return isinstance(node, ast.List | ast.Tuple | ast.ListComp | ast.Name)


def test_no_shell_anywhere_in_the_source() -> None:
    spawns = 0
    for where, node, (module, function) in _calls():
        assert (module, function) not in _SHELLS, f"{where}: {module}.{function} runs a shell"
        if module != "subprocess" or function not in _SPAWNERS:
            continue
        spawns += 1
        for keyword in node.keywords:
            if keyword.arg == "shell":
                value = keyword.value
                falsy = isinstance(value, ast.Constant) and not value.value
                assert falsy, f"{where}: subprocess.{function} with shell={ast.unparse(value)}"
        args = (
            node.args[0]
            if node.args
            else next((k.value for k in node.keywords if k.arg == "args"), None)
        )
        assert _is_argument_list(args), (
            f"{where}: subprocess.{function} is given {ast.unparse(args) if args else 'nothing'}"
            "; pass an argument list, never a command string"
        )
    # The walk saw the real calls (so it is not passing for want of finding any).
    assert spawns >= 8, spawns
