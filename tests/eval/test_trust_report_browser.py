"""The compare report's trust tables as a real browser renders them (headless Debian chromium, via playwright)."""

from __future__ import annotations

import io
import shutil

import pytest
from PIL import Image

from tests.helpers.trust_worlds import gated_learn_report, run_scripted_matrix
from tfgrpo.eval.compare import compare_runs

pytestmark = pytest.mark.timeout(180)
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def test_pareto_view_renders_in_headless_chromium(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="dev extra (CI installs it)")
    _, files = gated_learn_report(tmp_path)

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(files["html"].resolve().as_uri())
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
            pareto = page.locator("table#pareto")
            assert pareto.is_visible()
            box = pareto.bounding_box()
            rendered_rows = pareto.locator("tbody tr")
            assert rendered_rows.count() == 3  # step 0 and the two candidates
            assert box["height"] >= 4 * 15 and box["width"] > 300  # header + 3 rows laid out, not collapsed
            text = pareto.inner_text()  # innerText: what layout shows, not the source
            assert "step 0" in text and "On the front" in text
            image = Image.open(io.BytesIO(pareto.screenshot())).convert("L")
        finally:
            browser.close()
    dark = sum(1 for value in image.getdata() if value < 100)
    assert image.height >= 60 and dark > 500  # text and borders were painted
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_transfer_matrix_renders_in_headless_chromium(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="dev extra (CI installs it)")
    run_scripted_matrix(tmp_path)
    _, files = compare_runs([], tmp_path / "report", matrix=tmp_path / "matrix")

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(files["html"].resolve().as_uri())
            page.screenshot(path=str(tmp_path / "matrix.png"), full_page=True)
            table = page.locator("table#matrix")
            assert table.is_visible()
            assert table.locator("thead th").all_inner_texts() == ["Model", "none", "alpha-lib"]
            cells = [row.locator("td").all_inner_texts() for row in table.locator("tbody tr").all()]
            assert [c[0] for c in cells] == ["alpha", "beta"]
            assert cells[0][2].startswith("100.0%") and "Δ +50.0 pp" in cells[0][2]
            image = Image.open(io.BytesIO(table.screenshot())).convert("L")
        finally:
            browser.close()
    assert image.height >= 45 and sum(1 for value in image.getdata() if value < 100) > 500
