"""The committed studies' board in a real browser: Debian's chromium, headless, driven by
selenium, the board served over HTTP on localhost as a user's server would serve it. Every page
reachable from the index loads without a console error, every image loads, every local link
resolves and every study linked is one of the results.

Marked `browser`: the README's test command deselects it (pyproject's addopts), and `.ci/run`
runs it with `-m browser` after installing chromium, chromedriver and the `browser` extra, so
there a missing browser fails the run.
"""

from __future__ import annotations

import dataclasses
import functools
import http.server
import posixpath
import shutil
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from urllib.parse import urldefrag, urljoin, urlparse

import pytest

from vaco_jax.leaderboard.site import Built
from vaco_jax.leaderboard.studies import read_studies

from site_checks import RESULTS

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync")
"""A browser that asks nothing of the network (closed in CI) beyond the board's server."""
PAGE_STATE = """
return {
  images: Array.from(document.images, i => [i.getAttribute("src"), i.complete, i.naturalWidth]),
  links: Array.from(document.querySelectorAll("a[href], link[href]"), a => a.href),
  ids: Array.from(document.querySelectorAll("[id]"), e => e.id),
  title: document.title,
};
"""
"""What a loaded page holds: its images (loaded once complete with a width), the resolved
targets of its links and style sheets, its anchors' ids and its title."""


@dataclasses.dataclass(frozen=True)
class Visit:
    """One page as the browser loaded it."""

    errors: tuple[str, ...]  # its SEVERE console messages
    images: tuple[tuple[str, bool, int], ...]  # (src, complete, natural width)
    links: tuple[str, ...]  # absolute URLs
    ids: frozenset[str]
    title: str


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass  # a line per request would bury the test's own output


@pytest.fixture(scope="module")
def base_url(committed_board: Built) -> Iterator[str]:
    """The board served over HTTP on a free port of localhost, as a thread of this process."""
    handler = functools.partial(_QuietHandler, directory=str(committed_board.out))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{server.server_port}/"
        server.shutdown()
        thread.join()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Headless chromium under chromedriver, both the system's, with a fresh profile."""
    # Imported here: the rest of the suite is collected where the `browser` extra is not
    # installed, and a missing selenium must fail this test, not skip it.
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    paths = {name: shutil.which(name) for name in ("chromium", "chromedriver")}
    missing = [name for name, path in paths.items() if path is None]
    if missing:
        pytest.fail(f"{' and '.join(missing)} not found on PATH: apt-get install chromium "
                    f"chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = paths["chromium"]
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(paths["chromedriver"]))
    yield driver
    driver.quit()


def _is_page(url: str, base_url: str) -> bool:
    """Whether ``url`` is a page of the board (the browser visits those; files it fetches)."""
    return url.startswith(base_url) and urlparse(url).path.endswith(".html")


@pytest.fixture(scope="module")
def visits(browser, base_url) -> dict[str, Visit]:
    """Every page reachable from the index by its links, by its path in the board."""
    found: dict[str, Visit] = {}
    queue = [urljoin(base_url, "index.html")]
    while queue:
        url = queue.pop()
        path = url.removeprefix(base_url)
        if path in found:
            continue
        browser.get(url)  # returns once the page and its images have loaded or failed
        state = browser.execute_script(PAGE_STATE)
        errors = tuple(entry["message"] for entry in browser.get_log("browser")
                       if entry["level"] == "SEVERE")
        found[path] = Visit(errors=errors, images=tuple(map(tuple, state["images"])),
                            links=tuple(state["links"]), ids=frozenset(state["ids"]),
                            title=state["title"])
        queue += [urldefrag(link).url for link in state["links"] if _is_page(link, base_url)]
    return found


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_every_page_the_board_wrote_is_reached_from_the_index(committed_board, visits):
    assert sorted(visits) == sorted(committed_board.pages)


def test_no_page_logs_a_console_error(visits):
    assert {path: visit.errors for path, visit in visits.items() if visit.errors} == {}


def test_every_image_loads(committed_board, visits):
    images = [(path, image) for path, visit in visits.items() for image in visit.images]
    assert [(path, src) for path, (src, complete, width) in images
            if not (complete and width > 0)] == []
    # Each board's figure is shown on its study's page and on the index or the archive (a
    # study's README and report show its other figures).
    shown: dict[str, set[str]] = {}
    for path, (src, _, _) in images:
        shown.setdefault(posixpath.normpath(posixpath.join(posixpath.dirname(path), src)),
                         set()).add(path)
    boards = [p.relative_to(committed_board.out).as_posix()
              for p in committed_board.out.glob("studies/*/board_*.png")]
    assert boards
    for board in boards:
        front, study = sorted(shown.get(board, ())), f"{posixpath.dirname(board)}/index.html"
        assert front in (["archive.html", study], ["index.html", study]), (board, front)


def test_every_local_link_resolves_and_every_anchor_exists(visits, base_url):
    links = {link for visit in visits.values() for link in visit.links
             if link.startswith(base_url)}
    assert links, "the board links nothing of its own"
    targets = {urldefrag(link).url for link in links}
    assert {url: status for url in sorted(targets) if (status := _status(url)) != 200} == {}
    anchors = {(url.removeprefix(base_url), fragment)
               for url, fragment in map(urldefrag, links) if fragment}
    assert anchors and [(path, fragment) for path, fragment in sorted(anchors)
                        if path not in visits or fragment not in visits[path].ids] == []


def test_every_study_linked_is_one_of_the_results(visits, base_url):
    studies = {study.slug: study.name for study in read_studies(RESULTS)[0]}
    linked = {urldefrag(link).url.removeprefix(base_url) for visit in visits.values()
              for link in visit.links if link.startswith(base_url + "studies/")
              and link.endswith("/index.html")}
    assert linked, "no page links a study"
    for path in linked:
        slug = path.split("/")[1]
        assert slug in studies, path
        assert visits[path].title == f"Study {studies[slug]}"


SORTED_COLUMN = """
const table = document.querySelector("table.sortable");
return Array.from(table.tBodies[0].rows, row => Number(row.cells[arguments[0]].dataset.sort));
"""


def test_a_click_on_a_front_table_s_header_sorts_it(browser, base_url):
    browser.get(urljoin(base_url, "index.html"))
    score = 3  # task, method, lag, normalised score, ...
    before = browser.execute_script(SORTED_COLUMN, score)
    assert len(before) > 1 and before != sorted(before, reverse=True)
    header = browser.execute_script(
        "return document.querySelector('table.sortable').tHead.rows[0].cells[arguments[0]]",
        score)
    header.click()
    assert browser.execute_script(SORTED_COLUMN, score) == sorted(before, reverse=True)
    header.click()
    assert browser.execute_script(SORTED_COLUMN, score) == sorted(before)
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


PAGE_WIDTH = "return [document.documentElement.scrollWidth, window.innerWidth];"
NARROW = 400
"""A phone's width in CSS pixels: no page may be wider than its window there."""


def test_no_page_is_wider_than_a_400_pixel_window(browser, base_url, visits):
    browser.set_window_size(NARROW, 900)
    try:
        widths = {}
        for path in sorted(visits):
            browser.get(urljoin(base_url, path))
            widths[path] = browser.execute_script(PAGE_WIDTH)
    finally:
        browser.set_window_size(1280, 900)
    assert all(window <= NARROW for _, window in widths.values())  # the window did narrow
    assert {path: width for path, (width, window) in widths.items() if width > window} == {}
