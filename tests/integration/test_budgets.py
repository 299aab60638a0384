"""Size budgets through the CLI: `shipyard build` warns and succeeds, release validate
fails naming the same outputs. A real wheel and zipapp of a tiny project, built offline."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.tiny import make_repo, shipyard

pytestmark = [pytest.mark.integration]


def _repo(tmp_path: Path, size: str) -> Path:
    """A committed repository with one binary `app` (wheel and zipapp) and `size:` budgets."""
    root = make_repo(tmp_path / "repo", {})
    (root / "binaries.yaml").write_text(
        "schema: 1\n"
        'project: {name: tiny, version: "1.0.0", python: "3.11"}\n'
        "binaries:\n"
        "  app:\n"
        "    source: tiny\n"
        '    entrypoint: "tiny:main"\n'
        "    outputs: [wheel, zipapp]\n"
        f"    size: {size}\n"
    )
    git = ["git", "-C", str(root), "-c", "user.email=t@t.invalid", "-c", "user.name=t"]
    subprocess.run([*git, "commit", "-qam", "budgets"], check=True)
    return root


WARNING = re.compile(r"^warning: app (\w+) (\S+) is ([0-9.]+) (\w+), (over|under) .*$", re.M)


def test_build_warns_per_breach_and_release_validate_fails_on_them(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    root = _repo(tmp_path, "{wheel: {min: 1MB}, zipapp: {max: 1kB}}")

    built = shipyard(root, "build", cache=cache)
    assert built.returncode == 0, built.stderr
    pyz = root / "dist" / "zipapps" / "app-1.0.0.pyz"
    (wheel,) = (root / "dist" / "wheels").glob("tiny-1.0.0-*.whl")
    zipapp_kb = f"{pyz.stat().st_size / 1000:.1f}".rstrip("0").rstrip(".")
    assert (
        f"warning: app zipapp dist/zipapps/{pyz.name} is {zipapp_kb} kB, over its size budget "
        "of 1 kB (binaries.app.size.zipapp.max)"
    ) in built.stderr.splitlines()
    wheel_mb = f"{wheel.stat().st_size / 1e6:.1f}".rstrip("0").rstrip(".")
    assert (
        f"warning: app wheel dist/wheels/{wheel.name} is {wheel_mb} MB, under its size budget "
        "of 1 MB (binaries.app.size.wheel.min)"
    ) in built.stderr.splitlines()
    assert len(WARNING.findall(built.stderr)) == 2

    # The same breaches stop a release in validate (exit 1), before anything is staged
    # (a dry run: it needs no package index, and validates as a release does).
    released = shipyard(root, "release", "--version=1.0.0", "--dry-run", cache=cache)
    assert released.returncode == 1, released.stderr
    assert "validate   failed" in released.stderr and "stage      skipped" in released.stderr
    assert f"size budget: app wheel dist/wheels/{wheel.name} is " in released.stderr
    # The release stamps its own revision into the zipapp (a few bytes differ from the
    # build's): its size is read again, not assumed.
    zipapp_kb = f"{pyz.stat().st_size / 1000:.1f}".rstrip("0").rstrip(".")
    assert f"app zipapp dist/zipapps/{pyz.name} is {zipapp_kb} kB, over" in released.stderr
    assert "make the output smaller, or raise the budget" in released.stderr
    assert not (root / "dist" / "release").exists()

    # Within budget: no warning, and the release passes validate.
    roomy = _repo(tmp_path / "roomy", "{wheel: {max: 1MB}, zipapp: {min: 1kB, max: 40MB}}")
    quiet = shipyard(roomy, "build", cache=cache)
    assert quiet.returncode == 0, quiet.stderr
    assert "warning:" not in quiet.stderr
    dry_run = shipyard(roomy, "release", "--version=1.0.0", "--dry-run", cache=cache)
    assert dry_run.returncode == 0, dry_run.stderr
    assert "validate   ran" in dry_run.stderr
