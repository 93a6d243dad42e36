"""profiling.render_check: what counts as loading from the network, and real headless Chromium with the
network cut off telling pages that draw from pages that do not (skipped where Chromium is missing)."""

from __future__ import annotations

from profiling.render_check import external_loads


def test_external_loads_are_what_a_page_fetches_not_what_it_links() -> None:
    page = """<html><head>
    <script src="https://cdn.example/a.js"></script><script src="local.js"></script>
    <link rel="stylesheet" href="//cdn.example/b.css"><link rel="help" href="https://docs.example/">
    </head><body><a href="https://example.org/">docs</a><img src="http://img.example/c.png">
    <svg><image xlink:href="https://img.example/d.svg"/></svg>
    <script>const s = '<script src="https://inside.a.string/x.js">';</script></body></html>"""
    assert external_loads(page) == [
        "https://cdn.example/a.js",
        "//cdn.example/b.css",
        "http://img.example/c.png",
        "https://img.example/d.svg",
    ]
