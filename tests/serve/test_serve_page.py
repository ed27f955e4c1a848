"""`GET /` of `tfgrpo serve`, loaded by a real headless Chromium (Debian's package; never downloaded)."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser

import httpx

from tests.helpers.serve_fixtures import LESSONS, proxy, write_library
from tests.helpers.serve_upstream import ScriptedUpstream

QUESTION = [{"role": "user", "content": "What is 2+2?"}]


class _Cells(HTMLParser):
    """Text of every element with an id, and of every table cell, from the DOM Chromium rendered."""

    def __init__(self) -> None:
        super().__init__()
        self.by_id: dict[str, str] = {}
        self.cells: list[str] = []
        self._open: list[tuple[str | None, str]] = []

    def handle_starttag(self, tag, attrs):
        self._open.append((dict(attrs).get("id"), tag))
        if tag == "td":
            self.cells.append("")

    def handle_endtag(self, tag):
        while self._open and self._open.pop()[1] != tag:
            pass

    def handle_data(self, data):
        for element_id, _tag in self._open:
            if element_id:
                self.by_id[element_id] = self.by_id.get(element_id, "") + data
        if self._open and self._open[-1][1] == "td":
            self.cells[-1] += data


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "chromium is not installed (apt-get install -y chromium; scripts/install.sh does it)"
    return path


def _browser(*args: str) -> subprocess.CompletedProcess:
    command = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_page_shows_the_live_library_arms_and_versions_in_a_real_browser(tmp_path):
    with proxy(tmp_path, ScriptedUpstream(responder=lambda m, k: "\\boxed{4}"), holdout=0.5) as p:
        for user in range(10):
            exchange = httpx.post(
                p.url + "/v1/chat/completions", json={"model": "m", "messages": QUESTION, "user": f"u{user}"}
            )
            httpx.post(p.url + "/v1/feedback", json={"id": exchange.headers["x-tfgrpo-exchange-id"], "gold": "4"})
        arms = [row["arm"] for row in p.state.traces.exchanges()]
        dom = _browser("--dump-dom", p.url + "/")
        assert dom.returncode == 0, dom.stderr[-2000:]
        page = _Cells()
        page.feed(dom.stdout)
        assert page.by_id["library-version"] == "3"
        assert page.by_id["arm-A"] == str(arms.count("A")) and page.by_id["arm-B"] == str(arms.count("B"))
        assert 0 < arms.count("A") < 10
        for lesson in LESSONS.values():
            assert lesson in page.cells
        # usage counts: every B exchange injected all three experiences
        usage = page.cells[page.cells.index(LESSONS["G2"]) + 2]
        assert usage == str(arms.count("B"))
        # the per-version row: version 3, A and B both with mean reward 1.000
        versions = page.by_id["versions"]
        assert "3" in versions and versions.count("1.000") == 2 and "+0.000" not in versions
        screenshot = tmp_path / "page.png"
        shot = _browser(f"--screenshot={screenshot}", "--window-size=1200,900", p.url + "/")
        assert (
            shot.returncode == 0
            and screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            and screenshot.stat().st_size > 10_000
        )


def test_page_escapes_experience_text(tmp_path):
    library = write_library(tmp_path / "lib.json", {"G0": "<script>document.title='owned'</script> compare a<b"})
    with proxy(tmp_path, library=library) as p:
        html = httpx.get(p.url + "/").text
        assert "<script>document.title" not in html and "&lt;script&gt;" in html
