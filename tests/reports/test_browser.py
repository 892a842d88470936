"""The report opened in a real headless browser (Debian's chromium, driven by Playwright):
the page loads with no request leaving the file and no console error, every plot decodes to
a picture of its own size, and the full page renders to a screenshot with plots on it. Skipped
when no chromium is installed (`apt-get install chromium`); an error instead when
FORGEPLAY_REQUIRE_BROWSER is set, as in CI."""

from __future__ import annotations

import io
import os
import shutil

import pytest
from PIL import Image

from reports import write_report
from tests.reports.conftest import RUN

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if not CHROMIUM:
    if os.environ.get("FORGEPLAY_REQUIRE_BROWSER"):
        raise RuntimeError("FORGEPLAY_REQUIRE_BROWSER is set but no chromium is on PATH (apt-get install chromium)")
    pytest.skip("needs chromium (apt-get install chromium)", allow_module_level=True)


def colourful(png: bytes) -> float:
    """The share of pixels that are not grey (text and rules are grey; the plots' marks are not)."""
    img = Image.open(io.BytesIO(png)).convert("RGB")
    img.thumbnail((400, 4000))
    pixels = list(img.getdata())
    return sum(max(p) - min(p) > 40 for p in pixels) / len(pixels)


def test_the_report_renders_in_chromium(loop_run, embedded_tokenizer_dir, tmp_path):
    from playwright.sync_api import sync_playwright

    root, _ = loop_run
    path = write_report(root, RUN, out=tmp_path / "report.html", tokenizer=str(embedded_tokenizer_dir))
    requests, errors = [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("request", lambda r: requests.append(r.url))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(path.as_uri(), wait_until="load")
            images = page.evaluate("Array.from(document.images).map(i => "
                                   "[i.alt, i.complete, i.naturalWidth, i.naturalHeight, i.clientWidth])")
            sections = page.evaluate("Array.from(document.querySelectorAll('section h2')).map(h => h.textContent)")
            ids = page.evaluate("Array.from(document.querySelectorAll('[id]')).map(e => e.id)")
            shot = page.screenshot(full_page=True)
            plots = page.locator("img").first.screenshot()
        finally:
            browser.close()
    assert errors == []
    assert [u for u in requests if not u.startswith(("data:", path.as_uri()))] == []
    assert len(sections) >= 8 and len(images) >= 8
    assert len(ids) == len(set(ids)) > len(sections)  # every section and table can be linked to
    for alt, complete, width, height, shown in images:
        assert complete and width > 100 and height > 100 and shown > 100, alt
    assert colourful(plots) > 0.05  # the first plot's bars are drawn (0.28 here; a blank or broken image: 0)
    assert colourful(shot) > 0.02  # and the whole page shows its plots (0.06 here)
