"""SHA256SUMS, the changelog and SBOM documents of a staged release."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from shipyard.release.sbom import sbom_json
from shipyard.release.staging import changelog, sha256sums


def test_sums_cover_every_file_but_themselves_and_the_journal(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "a-1-py3-none-any.whl").write_bytes(b"wheel")
    (tmp_path / "release.json").write_text("{}")
    (tmp_path / "publish.journal").write_text("")
    (tmp_path / "SHA256SUMS").write_text("old")
    text = sha256sums(tmp_path)
    wheel = hashlib.sha256(b"wheel").hexdigest()
    assert text == (
        f"{hashlib.sha256(b'{}').hexdigest()}  release.json\n{wheel}  wheels/a-1-py3-none-any.whl\n"
    )
    (tmp_path / "SHA256SUMS").write_text(text)
    done = subprocess.run(
        ["sha256sum", "--strict", "-c", "SHA256SUMS"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (tmp_path / "release.json").write_text('{"tampered": 1}')
    tampered = subprocess.run(
        ["sha256sum", "-c", "SHA256SUMS"], cwd=tmp_path, capture_output=True, check=False
    )
    assert tampered.returncode != 0


def test_changelog_lists_commits_since_the_previous_tag(tmp_path: Path) -> None:
    git = ["git", "-C", str(tmp_path), "-c", "user.email=t@t.invalid", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "old work"], check=True)
    subprocess.run([*git, "tag", "v0.9.0"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "new work"], check=True)
    text = changelog(tmp_path, "mesh", "1.0.0")
    assert text.startswith("# mesh 1.0.0\n")
    assert "since v0.9.0" in text
    assert "new work" in text
    assert "old work" not in text


def test_sbom_is_valid_cyclonedx_and_deterministic() -> None:
    first = sbom_json("meshctl", "1.0.0", {"pyyaml": "6.0.2"}, epoch=315532800)
    assert first == sbom_json("meshctl", "1.0.0", {"pyyaml": "6.0.2"}, epoch=315532800)
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(first) is None
    doc = json.loads(first)
    assert doc["metadata"]["component"]["purl"] == "pkg:pypi/meshctl@1.0.0"
    assert [c["purl"] for c in doc["components"]] == ["pkg:pypi/pyyaml@6.0.2"]
    assert doc["metadata"]["timestamp"].startswith("1980-01-01")
