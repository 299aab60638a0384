"""`shipyard graph`'s page in a real browser: Debian's headless Chromium, offline.

The example suite with a change to its in-repo library mesh-config, drawn with
`--since`: the page renders without a console error and without a single request
beyond its own file, marks the library and what depends on it, and its search box
finds a node. A screenshot is left in dist/screenshots/graph-example.png. Then the
1,000-project workspace of benchmarks/engine.py: drawn in seconds, searchable.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.integration._repo import REPO, copy_worktree, shipyard
from tests.integration.conftest import require_services

if TYPE_CHECKING:
    from selenium.webdriver import Chrome

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
SCREENSHOTS = REPO / "dist" / "screenshots"
CHANGED = "examples/mesh/libs/config/src/meshconfig/__init__.py"


def _workspace(root: Path, count: int) -> Path:
    """The benchmark's generated workspace (benchmarks/ is scripts, not a package)."""
    spec = importlib.util.spec_from_file_location("bench_engine", REPO / "benchmarks/engine.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    made = module._workspace(root, count)
    assert isinstance(made, Path)
    return made


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    for path in (CHROMIUM, DRIVER):
        if not os.access(path, os.X_OK):
            return f"{path} is missing: apt-get install chromium chromium-driver (make services)"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Chrome]:
    """Headless Chromium through Debian's chromium-driver; every request it makes is
    logged (performance log), and a proxy that does not exist stands in for the network."""
    missing = _missing()
    if missing:
        if require_services():
            pytest.fail(missing)
        pytest.skip(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",  # as root in CI
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1600,1000",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--proxy-server=127.0.0.1:9",  # nothing listens: a fetch would fail and be logged
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _log(driver: Chrome, kind: str) -> list[dict[str, Any]]:
    """The entries of the browser's `kind` log since the last call."""
    entries: list[dict[str, Any]] = driver.get_log(kind)  # type: ignore[no-untyped-call]
    return entries


def _open(driver: Chrome, page: Path) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    _log(driver, "browser")  # what an earlier page left
    _log(driver, "performance")
    driver.get(page.as_uri())
    WebDriverWait(driver, 30).until(
        lambda d: d.execute_script("return document.body.getAttribute('data-ready')") == "1"
    )


def _requests(driver: Chrome) -> list[str]:
    """Every URL the page asked for since the last call."""
    urls = []
    for entry in _log(driver, "performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def _severe(driver: Chrome) -> list[str]:
    return [e["message"] for e in _log(driver, "browser") if e["level"] == "SEVERE"]


def _classes(driver: Chrome, node_id: str) -> set[str]:
    found = driver.execute_script(
        "var g = document.querySelector('g.node[data-id=\"' + arguments[0] + '\"]');"
        "return g ? g.getAttribute('class') : null;",
        node_id,
    )
    assert found is not None, f"{node_id} is not drawn"
    return set(str(found).split())


def _search(driver: Chrome, text: str) -> str:
    """Type `text` into the search box (after clearing it); the status line."""
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.ID, "search")
    box.clear()
    driver.execute_script("arguments[0].dispatchEvent(new Event('input'))", box)
    if text:
        box.send_keys(text)
    return str(driver.find_element(By.ID, "status").text)


def test_the_example_graph_marks_a_changed_library_and_searches(
    browser: Chrome, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    repo = copy_worktree(tmp_path / "repo")
    with (repo / CHANGED).open("a") as handle:
        handle.write("\n# a change to the in-repo library\n")
    page = tmp_path / "graph.html"
    done = shipyard(repo, "graph", "--since=HEAD", "-o", str(page))
    assert done.returncode == 0, done.stderr
    assert "marked since HEAD" in done.stderr

    _open(browser, page)
    assert _severe(browser) == []
    urls = _requests(browser)
    assert page.as_uri() in urls  # the log sees requests: nothing else was asked for
    assert {u.split(":", 1)[0] for u in urls} <= {"file", "data"}, urls
    assert "changed" in _classes(browser, "project:mesh-config")
    for node in ("project:mesh-agent", "binary:mesh-agent", "image:mesh-agent"):
        assert "affected" in _classes(browser, node), node
    for node in ("project:mesh-api", "binary:meshctl", "image:meshctl"):
        assert not {"changed", "affected"} & _classes(browser, node), node
    hot = browser.find_elements(By.CSS_SELECTOR, "#edges path.edge.hot")
    assert len(hot) == 5  # mesh-config -> mesh-agent (project) -> the binary -> 3 outputs
    summary = browser.find_element(By.ID, "summary-changed").text
    assert f"mesh-config: {CHANGED} changed" in summary
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOTS / "graph-example.png"
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    assert _search(browser, "config") == "1 match for \u201cconfig\u201d"
    assert "match" in _classes(browser, "project:mesh-config")
    assert "dim" in _classes(browser, "binary:meshctl")
    assert _search(browser, "meshctl").startswith("5 matches")  # project, binary, 3 outputs
    assert "match" in _classes(browser, "zipapp:meshctl")
    assert _search(browser, "") == "31 nodes, 27 edges"
    assert "dim" not in _classes(browser, "binary:meshctl")

    browser.find_element(By.CSS_SELECTOR, 'g.node[data-id="project:mesh-config"]').click()
    assert browser.find_element(By.CSS_SELECTOR, "#info h2").text == "mesh-config"
    assert "dim" in _classes(browser, "binary:meshctl")  # not what uses mesh-config
    assert "dim" not in _classes(browser, "image:mesh-agent")
    assert _severe(browser) == []


def test_a_thousand_projects_draw_in_seconds_and_search(browser: Chrome, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    repo = _workspace(tmp_path / "ws", 1000)
    page = tmp_path / "graph.html"
    shipyard(repo, "check")  # the manifest validated once, as for every later command
    start = time.monotonic()
    done = shipyard(repo, "graph", "--since=HEAD", "-o", str(page))
    took = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    assert "3000 nodes" in done.stderr
    assert took < 10, took  # about 2 s here; the issue asks for under 3 on a quiet machine

    start = time.monotonic()
    _open(browser, page)
    assert time.monotonic() - start < 10
    assert _severe(browser) == []
    # Folders of more than 30 nodes start collapsed: three boxes, not 3,000 nodes.
    assert browser.execute_script("return document.querySelectorAll('g.node').length") == 0
    assert _search(browser, "p400").startswith("3 matches")  # project, binary, wheel
    assert "changed" in _classes(browser, "project:p400")
    assert _search(browser, "p99").startswith("33 matches")  # p99 and p990..p999, each thrice
    _search(browser, "")
    browser.find_element(By.ID, "expand").click()
    assert browser.execute_script("return document.querySelectorAll('g.node').length") == 3000
    browser.find_element(By.CSS_SELECTOR, 'g.node[data-id="project:p500"]').click()
    assert browser.find_element(By.CSS_SELECTOR, "#info h2").text == "p500"
    # What p500 reaches is most of the chain: its own edges only (p166, p250, p499 it
    # needs; p501 and its binary use it), not thousands.
    assert browser.execute_script("return document.querySelectorAll('#edges path').length") == 5
    assert _severe(browser) == []
