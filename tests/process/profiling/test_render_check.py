"""profiling.render_check: what counts as loading from the network, and real headless Chromium with the
network cut off telling pages that draw from pages that do not (skipped where Chromium is missing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from profiling.render_check import check_page, find_chromium

CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)"
)

FLAMEGRAPH_SVG = """<svg xmlns="http://www.w3.org/2000/svg" width="200" height="40">
<g><title>main (app.py:1) (2 samples, 100%)</title><rect x="0%" y="20" width="100%" height="15"/></g>
<g><title>f (app.py:5) (1 samples, 50%)</title><rect x="0%" y="0" width="50%" height="15"/></g>
</svg>"""
DRAWS_OFFLINE = """<!DOCTYPE html><html><head><title>t</title></head><body>
<script>document.body.insertAdjacentHTML("beforeend", "<p>drawn by a script</p>")</script></body></html>"""
NEEDS_A_CDN = """<!DOCTYPE html><html><head><title>memray</title>
<script src="https://cdn.jsdelivr.net/npm/d3@7.9.0/dist/d3.min.js"></script></head>
<body><div id="chart"></div><script>d3.select("#chart").append("svg")</script></body></html>"""
BLANK = "<!DOCTYPE html><html><head><title>t</title></head><body><script>let x = 1</script></body></html>"


@needs_chromium
@pytest.mark.parametrize(
    ("name", "content", "problems"),
    [
        ("flamegraph.svg", FLAMEGRAPH_SVG, []),
        ("offline.html", DRAWS_OFFLINE, []),
        ("memray-cdn.html", NEEDS_A_CDN, ["loads from the network", "script error", "not drawn in #chart"]),
        ("blank.html", BLANK, ["nothing drawn"]),
        (
            "empty.svg",
            '<svg xmlns="http://www.w3.org/2000/svg"><rect width="0" height="1"/></svg>',
            ["frames"],
        ),
    ],
)
def test_chromium_tells_drawn_pages_from_broken_ones(
    tmp_path: Path, name: str, content: str, problems: list[str]
) -> None:
    assert CHROMIUM is not None
    page = tmp_path / name
    page.write_text(content)
    result = check_page(CHROMIUM, page, tmp_path / "profile")
    assert len(result.problems) == len(problems), result.problems
    for problem, expected in zip(result.problems, problems, strict=True):
        assert expected in problem


@needs_chromium
def test_command_line_exit_status(tmp_path: Path) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    (good / "page.html").write_text(DRAWS_OFFLINE)
    (bad / "page.html").write_text(BLANK)
    command = [sys.executable, "-m", "profiling.render_check"]
    passed = subprocess.run([*command, str(good)], capture_output=True, text=True, timeout=120)
    assert passed.returncode == 0, passed.stderr
    assert "1 of 1 pages drew offline" in passed.stdout
    failed = subprocess.run([*command, str(good), str(bad)], capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1
    assert f"{bad / 'page.html'}: nothing drawn" in failed.stderr
    missing = subprocess.run(
        [*command, str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=60
    )
    assert missing.returncode == 2 and "not a directory" in missing.stderr
