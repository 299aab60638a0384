"""The performance page's benchmark tables come from the recorded output, never typed by hand."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def _load_fill() -> Callable[[str, dict[str, str]], tuple[str, list[str], list[str]]]:
    """benchmarks/ is scripts, not a package: load the module from its file."""
    spec = importlib.util.spec_from_file_location("bench_tables", REPO / "benchmarks/_tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fill: Callable[[str, dict[str, str]], tuple[str, list[str], list[str]]] = module.fill
    return fill


fill = _load_fill()

README = """# x
<!-- bench:engine -->
old engine table
<!-- /bench:engine -->
between
<!-- bench:images -->
old images table
<!-- /bench:images -->
"""


def test_a_marked_block_takes_the_recorded_table_and_the_rest_stays() -> None:
    text, filled, missing = fill(README, {"engine": "| a | b |\n|---|---|\n| 1 | 2 |\n\n"})
    assert filled == ["engine"]
    assert missing == ["images"]
    assert "old engine table" not in text
    assert "<!-- bench:engine -->\n| a | b |\n|---|---|\n| 1 | 2 |\n<!-- /bench:engine -->" in text
    assert "old images table" in text, "a block with no recorded table is left as it was"
    assert "between" in text


def test_filling_twice_gives_the_same_text() -> None:
    once, _, _ = fill(README, {"engine": "new\n", "images": "img\n"})
    twice, _, _ = fill(once, {"engine": "new\n", "images": "img\n"})
    assert once == twice


def test_the_script_fills_a_readme_and_names_what_it_could_not_place(tmp_path: Path) -> None:
    tables = tmp_path / "bench"
    tables.mkdir()
    (tables / "engine.txt").write_text("E\n")
    (tables / "zipapp.txt").write_text("Z\n")
    readme = tmp_path / "README.md"
    readme.write_text(README)
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks/_tables.py"), str(tables), str(readme)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = readme.read_text()
    assert "<!-- bench:engine -->\nPrinted by `benchmarks/engine.py`" in text
    assert "```text\nE\n```\n<!-- /bench:engine -->" in text
    assert "no table recorded for images" in done.stdout
    assert "recorded but not in" in done.stdout and "zipapp" in done.stdout


def test_the_script_fills_several_files_alike(tmp_path: Path) -> None:
    """Given several files, each marked block takes the same table, and a table is "not
    placed" only when no file has its marker."""
    tables = tmp_path / "bench"
    tables.mkdir()
    (tables / "engine.txt").write_text("E\n")
    (tables / "images.txt").write_text("I\n")
    readme, page = tmp_path / "README.md", tmp_path / "performance.md"
    readme.write_text("<!-- bench:engine -->\nold\n<!-- /bench:engine -->\n")
    page.write_text(README)
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks/_tables.py"), str(tables), str(readme), str(page)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "```text\nE\n```\n<!-- /bench:engine -->" in readme.read_text()
    assert "```text\nE\n```\n<!-- /bench:engine -->" in page.read_text()
    assert "```text\nI\n```\n<!-- /bench:images -->" in page.read_text()
    assert f"filled engine in {readme}" in done.stdout
    assert f"filled engine, images in {page}" in done.stdout
    assert "recorded but not in" not in done.stdout


def test_a_file_without_markers_is_left_as_it_is(tmp_path: Path) -> None:
    """The README links to the performance page and holds no tables: passed anyway, it is
    tolerated and unchanged, and the tables count as not placed."""
    tables = tmp_path / "bench"
    tables.mkdir()
    (tables / "engine.txt").write_text("E\n")
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\nSee docs/performance.md.\n")
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks/_tables.py"), str(tables), str(readme)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert readme.read_text() == "# x\n\nSee docs/performance.md.\n"
    assert f"filled none in {readme}" in done.stdout
    assert "recorded but not in" in done.stdout and "engine" in done.stdout


def test_the_performance_page_has_a_block_for_every_benchmark() -> None:
    """The figures are published on one page: every script `nox -s bench` runs has its
    block there, and no block names a script that does not exist."""
    import re

    scripts = {p.stem for p in (REPO / "benchmarks").glob("*.py") if not p.name.startswith("_")}
    page = REPO / "docs/performance.md"
    names = set(re.findall(r"<!-- bench:([a-z0-9_-]+) -->", page.read_text()))
    assert names <= scripts, f"blocks no benchmark prints: {sorted(names - scripts)}"
    assert names >= scripts, f"benchmarks without a block: {sorted(scripts - names)}"


def test_the_bench_session_fills_the_performance_page_only() -> None:
    """`nox -s bench` hands _tables.py the performance page and not the README."""
    noxfile = (REPO / "noxfile.py").read_text()
    lines = noxfile.splitlines()
    call = next(line for line in lines if "benchmarks/_tables.py" in line and "run(" in line)
    assert '"docs/performance.md"' in call
    assert "README" not in call
