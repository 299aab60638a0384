"""The documentation site in a real browser: Debian's headless Chromium, over HTTP.

The site is built as `nox -s docs` builds it (`mkdocs build --strict`, the reference
pages generated from the code), served by Python's http.server on a free loopback
port (Material's search loads its index with fetch, which file:// refuses), and
opened through chromedriver. The pages must render with no SEVERE console message,
and searching for a manifest key must offer the manifest reference. Screenshots go
to dist/screenshots/ for people to look at.

Needs `chromium` and `chromium-driver` (Debian packages, installed by .ci/run) and
the test extra's mkdocs, mkdocs-material and selenium; without them the tests skip,
or fail under SHIPYARD_REQUIRE_SERVICES=1.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import require_services

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "dist" / "screenshots"
CHROMIUM = ("/usr/bin/chromium", "/usr/lib/chromium/chromium")
CHROMEDRIVER = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")
WAIT = 20  # seconds for a page or a search result


def _missing() -> str | None:
    for module in ("mkdocs", "material", "selenium"):
        if importlib.util.find_spec(module) is None:
            return f"python package {module} is not installed (pip install -e '.[test]')"
    if not any(os.access(p, os.X_OK) for p in CHROMIUM):
        return "chromium is not installed (apt-get install chromium)"
    if not any(os.access(p, os.X_OK) for p in CHROMEDRIVER):
        return "chromedriver is not installed (apt-get install chromium-driver)"
    return None


def _first(paths: tuple[str, ...]) -> str:
    return next(p for p in paths if os.access(p, os.X_OK))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built strict from this checkout into a temporary folder."""
    reason = _missing()
    if reason:
        if require_services():
            pytest.fail(f"SHIPYARD_REQUIRE_SERVICES=1: {reason}", pytrace=False)
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.fixture(scope="module")
def server(site: Path) -> Iterator[str]:
    """http://127.0.0.1:PORT/ serving the built site, on a port the system chose."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def browser(server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Headless Chromium through chromedriver, its console log kept."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = _first(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium')}",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(_first(CHROMEDRIVER)))
    driver.set_page_load_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()


def _open(browser: Any, url: str) -> list[dict[str, Any]]:
    """Load `url`, wait until it has rendered, and return the console's SEVERE entries."""
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get_log("browser")  # drop what earlier pages logged
    browser.get(url)
    WebDriverWait(browser, WAIT).until(
        lambda d: d.execute_script("return document.readyState") == "complete"
    )
    return [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]


def _shot(browser: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / name
    assert browser.save_screenshot(str(path)), f"no screenshot written to {path}"
    assert path.stat().st_size > 10_000, f"{path} is nearly empty"
    return path


def test_the_home_page_renders_without_console_errors(browser: Any, server: str) -> None:
    from selenium.webdriver.common.by import By

    severe = _open(browser, server)
    assert severe == [], severe
    assert browser.find_element(By.CSS_SELECTOR, "article h1").text == "shipyard"
    nav = browser.find_element(By.CSS_SELECTOR, "nav.md-nav--primary").get_attribute("textContent")
    for section in ("Tutorial", "How-to guides", "Reference", "Explanation", "Performance"):
        assert section in nav
    _shot(browser, "site-home.png")


def test_the_manifest_reference_renders_without_console_errors(browser: Any, server: str) -> None:
    from selenium.webdriver.common.by import By

    severe = _open(browser, server + "reference/manifest/")
    assert severe == [], severe
    article = browser.find_element(By.CSS_SELECTOR, "article").text
    assert "binaries.<name>.entrypoint" in article
    assert "module:function that runs the program" in article
    assert 'list of "wheel" | "zipapp" | "image"' in article, "a choice split across cells"
    browser.execute_script("document.getElementById('binaries').scrollIntoView()")
    time.sleep(0.5)  # the header's title fades to the page's on scroll; shoot it settled
    _shot(browser, "reference-manifest.png")


def test_searching_a_manifest_key_finds_the_manifest_reference(browser: Any, server: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    assert _open(browser, server) == []
    # At this width Material shows the search field in the header; typing into it
    # opens the results as a reader's typing does.
    field = WebDriverWait(browser, WAIT).until(
        lambda d: d.find_element(By.CSS_SELECTOR, "input.md-search__input")
    )
    field.click()
    field.send_keys("entrypoint")

    def manifest_hits(driver: Any) -> list[str]:
        links = driver.find_elements(By.CSS_SELECTOR, "li.md-search-result__item a")
        return [h for a in links if "reference/manifest/" in (h := a.get_attribute("href") or "")]

    hits = WebDriverWait(browser, WAIT).until(manifest_hits)
    assert hits[0].startswith(server + "reference/manifest/")
    _shot(browser, "site-search.png")
    assert [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"] == []


def test_the_cli_reference_lists_a_real_flag(browser: Any, server: str) -> None:
    from selenium.webdriver.common.by import By

    assert _open(browser, server + "reference/cli/") == []
    article = browser.find_element(By.CSS_SELECTOR, "article").text
    assert "--keep-going" in article
    assert "after a failure, finish what does not depend on it" in article
