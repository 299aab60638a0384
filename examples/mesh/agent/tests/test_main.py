"""mesh-agent's command line: --once, config files and flag validation (no sockets)."""

import json
from pathlib import Path

import pytest
from meshagent import YAML_NATIVE
from meshagent.main import main


def test_once_prints_the_health_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--once"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "ok"
    assert report["yaml_native"] is YAML_NATIVE
    assert isinstance(report["version"], str)
    assert report["version"]


def test_once_accepts_a_valid_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text("host: 127.0.0.1\nport: 0\n", encoding="utf-8")
    assert main(["--config", str(config), "--once"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "ok"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("port: yes\n", "'port' must be an integer 0-65535"),
        ("listen: 80\n", "unknown setting(s) listen"),
        ("port: [\n", "is not valid YAML"),
    ],
)
def test_a_bad_config_exits_1_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, error: str
) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(text, encoding="utf-8")
    assert main(["--config", str(config), "--once"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("mesh-agent: ")
    assert str(config) in err
    assert error in err


def test_a_missing_config_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(tmp_path / "absent.yaml"), "--once"]) == 1
    assert "cannot read config" in capsys.readouterr().err


@pytest.mark.parametrize("port", ["-1", "65536", "http"])
def test_port_flag_is_validated(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--port", port, "--once"])
    assert exit_info.value.code == 2
    assert "port must be an integer 0-65535" in capsys.readouterr().err
