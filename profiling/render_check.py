"""``python -m profiling.render_check DIR [DIR...]``: open every HTML and SVG page under the directories in
headless Chromium with the network cut off, and check that each one drew what it should.

A page passes when it names nothing on the network to load (no ``http(s)://`` script, style sheet,
image or frame), Chromium logged no script error while it ran, and what it drew (the DOM after its
scripts ran, from ``chromium --dump-dom``) holds:

    memray flamegraph (HTML)   the flame graph: an <svg> in #chart with frames in it
    Locust report (HTML)       its tables and charts: <table> and <canvas>
    flamegraph (SVG)           frames: <rect> elements with a width
    any other page             some text or a drawing

Chromium is Debian's ``chromium`` (``apt-get install chromium``); without it the check says so and
exits 2. Exit status: 0 every page drew, 1 some did not (one line each on stderr), 2 bad usage or no
Chromium. Checks run one page at a time, a few seconds each.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import ClassVar

__all__ = ["PageResult", "check_page", "find_chromium", "main", "pages"]

_CHROMIUMS = ("chromium", "chromium-browser", "google-chrome")
_PAGE_TIMEOUT = 90.0
_NETWORK_OFF = [
    "--host-resolver-rules=MAP * ~NOTFOUND",  # no name resolves ...
    "--proxy-server=socks5://127.0.0.1:9",  # ... and every connection goes to a port nothing serves
    "--disable-background-networking",
]
_CONSOLE_ERROR = re.compile(r":CONSOLE[^\]]*\] \"(?:Uncaught|.*Error|Failed to load)", re.I)
_DRAWN_RECT = re.compile(r"<rect\b[^>]*\bwidth=\"(?!0[\"%])[\d.]+%?\"")
_TEXT = re.compile(r"<script\b.*?</script>|<style\b.*?</style>|<[^>]+>", re.S | re.I)


@dataclass(frozen=True)
class PageResult:
    path: Path
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def find_chromium() -> str | None:
    return next((found for name in _CHROMIUMS if (found := shutil.which(name))), None)


def pages(directories: Sequence[Path]) -> Iterator[Path]:
    """Every .html and .svg file under the directories, in path order."""
    for directory in directories:
        yield from sorted(path for path in directory.rglob("*") if path.suffix in (".html", ".svg"))


class _ExternalLoads(HTMLParser):
    """Collects what a page would fetch from the network: scripts, style sheets, images, frames."""

    _LOADING: ClassVar[dict[str, tuple[str, ...]]] = {
        "script": ("src",),
        "img": ("src",),
        "iframe": ("src",),
        "link": ("href",),
        "image": ("href", "xlink:href"),  # SVG
    }

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "link" and (values.get("rel") or "").lower() not in (
            "stylesheet",
            "preload",
            "modulepreload",
        ):
            return  # a link to follow, not to load
        for name in self._LOADING.get(tag, ()):
            url = values.get(name) or ""
            if url.startswith(("http://", "https://", "//")):
                self.urls.append(url)

    handle_startendtag = handle_starttag


def external_loads(source: str) -> list[str]:
    parser = _ExternalLoads()
    parser.feed(source)
    parser.close()
    return parser.urls


def _drawing_problem(path: Path, source: str, dom: str) -> str | None:
    """What the page should have drawn and did not, by the kind of page; None when it did."""
    if path.suffix == ".svg":
        frames = len(_DRAWN_RECT.findall(dom))
        return None if frames >= 2 else f"a flamegraph with frames expected, found {frames} drawn <rect>"
    if 'id="chart"' in source and "memray" in source:
        chart = dom.partition('id="chart"')[2]
        drawn = chart.lstrip(">").lstrip().startswith("<svg") and len(_DRAWN_RECT.findall(chart)) >= 1
        return None if drawn else "memray's flame graph was not drawn in #chart"
    if "<title>Locust</title>" in source:
        missing = [tag for tag in ("<table", "<canvas") if tag not in dom]
        return f"Locust's report drew no {' or '.join(missing)}" if missing else None
    body = dom.partition("<body")[2] or dom  # the head's title is not drawn
    text = " ".join(_TEXT.sub(" ", "<body" + body).split())
    return (
        None if text or "<svg" in dom or "<canvas" in dom else "nothing drawn: no text, no <svg>, no <canvas>"
    )


def check_page(chromium: str, path: Path, profile_dir: Path) -> PageResult:
    """Render one page offline in headless Chromium and check what it drew."""
    source = path.read_text(errors="replace")
    problems = [f"loads from the network: {url}" for url in external_loads(source)]
    argv = [chromium, "--headless", "--disable-gpu", "--no-first-run", *_NETWORK_OFF]
    if os.geteuid() == 0:
        argv.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox
    argv += ["--virtual-time-budget=10000", "--enable-logging=stderr", "--v=0"]
    argv += [f"--user-data-dir={profile_dir}", "--dump-dom", path.resolve().as_uri()]
    try:
        finished = subprocess.run(argv, capture_output=True, text=True, timeout=_PAGE_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return PageResult(path, [*problems, f"Chromium did not finish within {_PAGE_TIMEOUT:.0f} s"])
    if finished.returncode != 0 or not finished.stdout.strip():
        said = finished.stderr.strip().splitlines()[-1:] or [""]
        return PageResult(path, [*problems, f"Chromium exited {finished.returncode}: {said[0][:200]}"])
    problems += [f"script error: {line.strip()[:200]}" for line in finished.stderr.splitlines()
                 if _CONSOLE_ERROR.search(line)]  # fmt: skip
    drawing = _drawing_problem(path, source, finished.stdout)
    return PageResult(path, problems + ([drawing] if drawing else []))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m profiling.render_check",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("directories", nargs="+", type=Path, help="profile sets, Locust reports, ...")
    args = parser.parse_args(argv)
    missing = [str(directory) for directory in args.directories if not directory.is_dir()]
    if missing:
        print(f"render_check: not a directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    chromium = find_chromium()
    if chromium is None:
        print("render_check: Chromium not found; install it with: apt-get install chromium", file=sys.stderr)
        return 2
    found = list(pages(args.directories))
    if not found:
        print("render_check: no .html or .svg page in the directories", file=sys.stderr)
        return 2
    failed = 0
    with tempfile.TemporaryDirectory(prefix="render-check-") as profile_dir:
        for number, path in enumerate(found, 1):
            result = check_page(chromium, path, Path(profile_dir))
            print(f"[{number}/{len(found)}] {'ok  ' if result.ok else 'FAIL'} {path}", flush=True)
            for problem in result.problems:
                print(f"render_check: {path}: {problem}", file=sys.stderr)
            failed += not result.ok
    print(f"{len(found) - failed} of {len(found)} pages drew offline", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
