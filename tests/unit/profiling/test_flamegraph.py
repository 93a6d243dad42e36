"""profiling.flamegraph: a static SVG of the width a browser shows, thin frames merged, the title and
the weights said, names escaped."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from collections import Counter

from profiling.flamegraph import MIN_FRAME_PX, WIDTH, render_svg

SVG = "{http://www.w3.org/2000/svg}"


def frames(svg: str) -> dict[str, float]:
    """Each drawn frame's hover text (name and weight) -> its width in pixels."""
    root = ElementTree.fromstring(svg)
    found = {}
    for group in root.iter(f"{SVG}g"):
        title, rect = group.find(f"{SVG}title"), group.find(f"{SVG}rect")
        assert title is not None and title.text is not None and rect is not None
        found[title.text] = float(rect.attrib["width"])
    return found


def test_the_page_is_as_wide_as_a_browser_shows_it_and_says_what_it_draws() -> None:
    svg = render_svg(Counter({("main (a.py:1)", "f (a.py:5)"): 3}), "CPU, n1: 3 samples", "samples")
    root = ElementTree.fromstring(svg)
    assert root.attrib["width"] == str(WIDTH)
    title = root.find(f"{SVG}title")
    assert title is not None and title.text == "CPU, n1: 3 samples: 3 samples"  # the counts by default
    assert ">3 samples</text>" in svg and ">Frames under 3 px (0.25%) merged" in svg
    assert "<script" not in svg
    assert frames(svg) == {
        "all (3 samples, 100.0%)": WIDTH - 20,
        "main (a.py:1) (3 samples, 100.0%)": WIDTH - 20,
        "f (a.py:5) (3 samples, 100.0%)": WIDTH - 20,
    }


def test_thin_frames_merge_and_frames_too_thin_even_merged_are_left_out() -> None:
    """1,000 samples over 1,180 px: 3 px is about 2.5 samples. Ten one-sample siblings merge into one
    frame of 10; a lone one-sample frame under another parent is left out."""
    stacks: Counter[tuple[str, ...]] = Counter(
        {("main", "big"): 900, ("other", "lone"): 1, ("other", "wide"): 89}
    )
    stacks.update({("main", f"tiny{index}"): 1 for index in range(10)})
    drawn = frames(render_svg(stacks, "t", "samples"))
    assert "[10 thin frames] (10 samples, 1.0%)" in drawn
    assert not any(name.startswith(("tiny", "lone")) for name in drawn)
    assert all(width >= MIN_FRAME_PX for width in drawn.values())
    assert drawn["big (900 samples, 90.0%)"] == 1062.0


def test_a_label_is_the_function_alone_or_cut_short_when_the_frame_is_narrow() -> None:
    name = "Coordinator.put_with_a_long_name (kvnode/coordinator/coordinator.py:88)"
    for weight, label in ((200, "Coordinator.put_with_a_long_name"), (120, "Coordinator.put_wi..")):
        stacks: Counter[tuple[str, ...]] = Counter({("main", name): weight, ("main", "rest"): 1000 - weight})
        labels = re.findall(r">([^<>]+)</text></g>", render_svg(stacks, "t", "samples"))
        assert label in labels  # 236 px: the function without its file; 142 px: cut short too


def test_names_are_escaped_and_a_note_is_written_under_the_title() -> None:
    stacks: Counter[tuple[str, ...]] = Counter({("<module> (a.py:1)", "f & g"): 2})
    svg = render_svg(stacks, "t <1>", "allocations", "2 in 1 s", "Smoke")
    ElementTree.fromstring(svg)  # well-formed: <, > and & escaped
    assert "&lt;module&gt; (a.py:1) (2 allocations, 100.0%)" in svg and "f &amp; g" in svg
    assert ">t &lt;1&gt;</text>" in svg and ">2 in 1 s</text>" in svg
    assert 'fill="rgb(170,0,0)">Smoke</text>' in svg
