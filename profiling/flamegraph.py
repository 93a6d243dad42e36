"""Flamegraph SVGs drawn from collapsed stacks, sized to be read in a browser as it shows them.

py-spy's and memray's own pages draw every frame, however thin, at the width of the window: at a few
thousand samples most frames are a pixel wide and unlabelled, and memray's page weighs megabytes.
Here the graph is ``WIDTH`` pixels wide, a frame narrower than ``MIN_FRAME_PX`` is merged with its thin
siblings into one ``[N thin frames]`` frame (dropped if even that stays too thin), and the title says what
was sampled and how many samples there are. Each frame's hover text gives its full name, weight and
share. The page is static SVG: no script, nothing fetched.

>>> svg = render_svg({("main", "f"): 3, ("main", "g"): 1}, "CPU, n1", "samples")
>>> svg.count("<g>"), "main (4 samples, 100.0%)" in svg
(4, True)
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from html import escape

__all__ = ["MIN_FRAME_PX", "WIDTH", "render_svg"]

WIDTH = 1200
MIN_FRAME_PX = 3.0
_MARGIN = 10
_FRAME_HEIGHT = 16
_HEADER = 80  # the title, counts, legend, a note and a line of space
_CHAR_PX = 6.6  # an 11 px monospace character, for fitting labels
_OWN_CODE = "kvnode/"  # frames of kvnode's own modules get a colour of their own


@dataclass
class _Frame:
    name: str
    weight: int = 0
    children: dict[str, _Frame] = field(default_factory=dict)


def _tree(stacks: Mapping[tuple[str, ...], int]) -> _Frame:
    root = _Frame("all")
    for stack, weight in stacks.items():
        root.weight += weight
        node = root
        for name in stack:
            node = node.children.setdefault(name, _Frame(name))
            node.weight += weight
    return root


def _visible_children(frame: _Frame, min_weight: float) -> list[_Frame]:
    """The children wide enough to draw, heaviest first, the thin ones merged into one frame."""
    wide = sorted((c for c in frame.children.values() if c.weight >= min_weight), key=lambda c: -c.weight)
    thin = [child for child in frame.children.values() if child.weight < min_weight]
    merged = sum(child.weight for child in thin)
    if thin and merged >= min_weight:
        wide.append(_Frame(f"[{len(thin)} thin frames]", merged))
    return wide


def _colour(name: str) -> str:
    """A stable warm colour per frame; kvnode's own frames in blue-green, merged frames grey."""
    if name.startswith("["):
        return "rgb(200,200,200)"
    shade = zlib.crc32(name.encode()) % 60
    if _OWN_CODE in name:
        return f"rgb({60 + shade},{170 + shade // 2},{190 + shade // 2})"
    return f"rgb(235,{120 + shade * 2},{50 + shade})"


def _label(name: str, width: float) -> str:
    """The frame's name if it fits, else its function without the file, cut short if need be."""
    fits = int((width - 6) / _CHAR_PX)
    if fits < 3:
        return ""
    if len(name) > fits:
        name = name.partition(" (")[0]
    return name if len(name) <= fits else name[: fits - 2] + ".."


def render_svg(
    stacks: Mapping[tuple[str, ...], int], title: str, unit: str, counts: str = "", note: str = ""
) -> str:
    """A flamegraph of ``stacks`` (root first), root at the bottom; ``unit`` names a weight (samples,
    allocations, bytes). Under the title: ``counts`` (by default the total weight), a legend, and
    ``note`` in red."""
    root = _tree(stacks)
    total = max(root.weight, 1)
    plot_width = WIDTH - 2 * _MARGIN
    min_weight = total * MIN_FRAME_PX / plot_width
    rows: list[tuple[int, float, _Frame]] = []  # (depth, x, frame), depth 0 the root

    def place(frame: _Frame, depth: int, x: float) -> None:
        rows.append((depth, x, frame))
        for child in _visible_children(frame, min_weight):
            place(child, depth + 1, x)
            x += child.weight / total * plot_width

    place(root, 0, _MARGIN)
    depth = max((row[0] for row in rows), default=0) + 1
    height = _HEADER + depth * _FRAME_HEIGHT + _MARGIN
    counts = counts or f"{root.weight:,} {unit}"
    legend = (
        f"Frames under {MIN_FRAME_PX:g} px ({MIN_FRAME_PX / plot_width:.2%}) merged into [N thin frames]; "
        "blue-green: kvnode's own code. Hover a frame for its name and share."
    )
    centred = f'<text x="{WIDTH // 2}" text-anchor="middle"'
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="monospace" font-size="11">',
        f"<title>{escape(title)}: {escape(counts)}</title>",
        f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="rgb(250,250,245)"/>',
        f'{centred} y="20" font-size="15">{escape(title)}</text>',
        f'{centred} y="38" font-size="13">{escape(counts)}</text>',
        f'{centred} y="54">{escape(legend)}</text>',
    ]
    if note:
        parts.append(f'{centred} y="69" fill="rgb(170,0,0)">{escape(note)}</text>')
    for level, x, frame in rows:
        width = frame.weight / total * plot_width
        y = height - _MARGIN - (level + 1) * _FRAME_HEIGHT
        hover = f"{frame.name} ({frame.weight:,} {unit}, {frame.weight / total:.1%})"
        label = _label(frame.name, width)
        text = f'<text x="{x + 3:.1f}" y="{y + 12}">{escape(label)}</text>' if label else ""
        parts.append(
            f'<g><title>{escape(hover)}</title><rect x="{x:.1f}" y="{y}" width="{width:.1f}" '
            f'height="{_FRAME_HEIGHT - 1}" fill="{_colour(frame.name)}" rx="2"/>{text}</g>'
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
