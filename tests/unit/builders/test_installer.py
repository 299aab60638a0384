"""The installer's options for a target platform: pip's tags and the environment it gets
(issue 15: macOS 11 and Windows; real installs are in test_resolve.py and
zipapp/test_zipapp_platforms_os.py), and where uv's wheel hashes are asked (issue 28)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from shipyard.builders import installer as installing
from shipyard.builders.distributions import Distribution
from shipyard.manifest import PLATFORMS


def test_the_installer_is_asked_for_macos_11_and_the_windows_tags() -> None:
    assert installing._pip_platforms("darwin/arm64") == ["macosx_11_0_arm64"]
    assert installing._pip_platforms("darwin/amd64") == ["macosx_11_0_x86_64"]
    assert installing._pip_platforms("windows/amd64") == ["win_amd64"]
    assert installing._pip_platforms("windows/arm64") == ["win_arm64"]
    assert installing.target_env("darwin/arm64") == {"MACOSX_DEPLOYMENT_TARGET": "11.0"}
    assert installing.target_env("windows/arm64") == {}
    assert set(installing.PLATFORM_ARCH) == set(PLATFORMS)


def _fake_uv(tmp_path: Path, offline_fails: bool) -> tuple[Path, Path]:
    """A uv that writes each command line to a file and answers `pip compile` with a
    pylock naming helper's wheel (or fails offline, as with no cache): itself, the file."""
    calls = tmp_path / "calls.jsonl"
    script = tmp_path / "uv"
    lock = (
        '[[packages]]\nname = "helper"\nversion = "2.0"\nwheels = ['
        '{ name = "helper-2.0-py3-none-any.whl", url = "https://index.invalid/h.whl", '
        'hashes = { sha256 = "' + "a" * 64 + '" } }]\n'
    )
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"if {offline_fails!r} and '--offline' in sys.argv:\n"
        "    sys.exit(2)\n"
        f"sys.stdout.write({lock!r})\n"
    )
    script.chmod(0o755)
    return script, calls


_HELPER = Distribution("helper", "2.0", True, tags=frozenset({"py3-none-any"}))


@pytest.mark.parametrize("offline_fails", [False, True])
def test_wheel_hashes_come_from_uvs_cache_else_from_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline_fails: bool
) -> None:
    uv, calls = _fake_uv(tmp_path, offline_fails)
    monkeypatch.setattr(installing, "uv_binary", lambda: str(uv))
    found = installing.locked_hashes([_HELPER], "linux/amd64", "3.11", {}, "/opt/py/bin/python")
    assert found == {"helper": "a" * 64}
    made = [json.loads(line) for line in calls.read_text().splitlines()]
    # First from the pages the install left in uv's cache, with the install's interpreter.
    assert made[0][:2] == ["pip", "compile"] and "--offline" in made[0]
    assert made[0][made[0].index("--python") + 1] == "/opt/py/bin/python"
    if offline_fails:  # then as before: the index asked, uv finding its interpreter
        assert len(made) == 2 and "--offline" not in made[1] and "--python" not in made[1]
    else:
        assert len(made) == 1


def test_the_interpreter_is_the_one_uvs_install_named(tmp_path: Path) -> None:
    python = tmp_path / "bin" / "python3.11"
    python.parent.mkdir()
    python.write_text("")
    output = f"$ uv pip install ...\nUsing CPython 3.11.7 interpreter at: {python}\nResolved 1\n"
    assert installing.interpreter_used(output) == str(python)
    assert installing.interpreter_used(output.replace(str(python), "/gone/python")) is None
    assert installing.interpreter_used("Resolved 7 packages in 2ms\n") is None


def test_uv_installs_with_the_running_interpreter_not_one_it_searches_for(
    tmp_path: Path,
) -> None:
    """uv's search starts whatever `python3` is on PATH (a version manager's shell shim,
    slower than installing cached wheels): the install names the running interpreter."""
    command = installing.install_command("linux/arm64", "3.12", tmp_path, ["attrs==23.2.0"])
    if Path(command[0]).name != "uv":
        pytest.skip("uv is not installed: pip's command has no interpreter search")
    assert command[command.index("--python") + 1] == sys.executable
    assert command[command.index("--python-version") + 1] == "3.12"
    assert command[command.index("--python-platform") + 1].startswith("aarch64")
