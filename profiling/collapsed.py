"""Collapsed stacks (py-spy's ``--format raw``, Brendan Gregg's folded format) and top-frame tables.

One line per distinct stack, root first, frames separated by ``;``, then a space and a sample count::

    main (app.py:1);handle (app.py:9);parse (app.py:20) 7

A frame's *self* share is the fraction of samples in which it is the leaf (where the time is spent); its
*total* share the fraction of samples in which it appears anywhere (what it calls included). A recursive
frame appears several times in one stack but is counted once per stack for total, or its total could pass
100%.

>>> stacks = parse_collapsed("main;a;b 3\\nmain;a 1\\n")
>>> [(row.frame, row.self_share, row.total_share) for row in top_frames(stacks, by="total")]
[('a', 0.25, 1.0), ('main', 0.0, 1.0), ('b', 0.75, 0.75)]
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "NO_PYTHON_FRAME",
    "CollapsedFormatError",
    "FrameShare",
    "SampleSplit",
    "Stacks",
    "format_collapsed",
    "frame_module",
    "is_waiting_frame",
    "merge",
    "parse_collapsed",
    "source_package",
    "split_samples",
    "top_frames",
    "trunk",
]

NO_PYTHON_FRAME = "[no Python frame]"  # a sample or allocation with an empty stack

# Frames where a thread waits when they are innermost: (file suffix, function names). The event loop
# polls there (asyncio's _run_once and selectors' select; uvloop's poll and libuv are C below
# asyncio.Runner.run or uvloop.run, with no Python frame of their own), and threads block in
# threading's waits. Without native frames the loop's own C work looks the same as its poll; py-spy's
# cpu profiles keep far more such samples than the process had CPU time for (the report shows both),
# so they count as waiting.
_WAITING_FRAMES = (
    ("asyncio/runners.py", {"run"}),
    ("uvloop/__init__.py", {"run"}),
    ("asyncio/base_events.py", {"run_forever", "run_until_complete", "_run_once"}),
    ("selectors.py", {"select"}),
    ("threading.py", {"wait"}),
)
_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^():]*)(?::\d+)?\)$")

Stacks = Counter[tuple[str, ...]]
"""Root-first stack -> weight (samples for py-spy, allocations or bytes for memray)."""


class CollapsedFormatError(ValueError):
    """A line that is not ``frame;frame;... COUNT``."""


@dataclass(frozen=True, slots=True)
class FrameShare:
    frame: str
    self_weight: int
    total_weight: int
    self_share: float
    total_share: float


def parse_collapsed(text: str) -> Stacks:
    """Stacks from collapsed text; equal stacks on several lines are added up, blank lines skipped."""
    stacks: Stacks = Counter()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        # The count follows the last space: frames themselves contain spaces ("f (file.py:3)").
        stack_text, _, count_text = line.rstrip().rpartition(" ")
        try:
            count = int(count_text)
        except ValueError:
            raise CollapsedFormatError(f"line {number}: no sample count at the end: {line[:80]!r}") from None
        if count < 0:
            raise CollapsedFormatError(f"line {number}: negative count: {line[:80]!r}")
        # py-spy writes " N" for samples it caught outside any Python frame.
        stack = tuple(stack_text.strip().split(";")) if stack_text.strip() else (NO_PYTHON_FRAME,)
        stacks[stack] += count
    return stacks


def format_collapsed(stacks: Mapping[tuple[str, ...], int]) -> str:
    """The inverse of parse_collapsed, heaviest stack first (ties in stack order, so output is stable)."""
    ordered = sorted(stacks.items(), key=lambda item: (-item[1], item[0]))
    return "".join(f"{';'.join(stack)} {weight}\n" for stack, weight in ordered if weight > 0)


def merge(stack_sets: Iterable[Mapping[tuple[str, ...], int]]) -> Stacks:
    merged: Stacks = Counter()
    for stacks in stack_sets:
        merged.update(stacks)
    return merged


def top_frames(
    stacks: Mapping[tuple[str, ...], int], *, by: Literal["self", "total"], limit: int | None = None
) -> list[FrameShare]:
    """Frames ranked by self or total weight (ties by name); shares are fractions of all weight."""
    self_weight: Counter[str] = Counter()
    total_weight: Counter[str] = Counter()
    for stack, weight in stacks.items():
        if not stack:
            continue
        self_weight[stack[-1]] += weight
        for frame in set(stack):  # once per stack: recursion must not count a sample twice
            total_weight[frame] += weight
    grand_total = sum(stacks.values())
    if grand_total <= 0:
        return []
    ranking = self_weight if by == "self" else total_weight
    frames = sorted((f for f in total_weight if ranking[f] > 0), key=lambda frame: (-ranking[frame], frame))
    return [
        FrameShare(
            frame,
            self_weight[frame],
            total_weight[frame],
            self_weight[frame] / grand_total,
            total_weight[frame] / grand_total,
        )
        for frame in frames[:limit]
    ]


def trunk(stacks: Mapping[tuple[str, ...], int], threshold: float = 0.95) -> list[str]:
    """The entry path every request runs under (runpy, main, down to the event loop's run), root first:
    its frames' total share says nothing, so the total tables leave them out.

    From the heaviest root frame (if it holds most of the weight), follow the child that holds at least
    ``threshold`` of its parent's weight. Weight outside the root frame does not stop the walk: py-spy's
    non-blocking samples are sometimes torn and start mid-stack.

    >>> trunk(parse_collapsed("main;loop 5\\nmain;loop;a 10\\nmain;loop;b 4\\nb 1\\n"))
    ['main', 'loop']
    """
    path: list[str] = []
    candidates = [(stack, weight) for stack, weight in stacks.items() if stack and weight > 0]
    parent_weight = sum(weight for _, weight in candidates) / 2  # the root frame needs only a majority
    for depth in itertools.count():
        children: Counter[str] = Counter()
        for stack, weight in candidates:
            if len(stack) > depth:
                children[stack[depth]] += weight
        if not children:
            break
        frame, weight = children.most_common(1)[0]
        if weight < threshold * parent_weight:
            break
        path.append(frame)
        candidates = [(stack, w) for stack, w in candidates if len(stack) > depth and stack[depth] == frame]
        parent_weight = weight
    return path


def frame_module(frame: str) -> str:
    """The source file of ``frame`` (``function (file:line)``), or the frame itself when it names none.

    >>> frame_module("Coordinator.put (kvnode/coordinator/coordinator.py:88)")
    'kvnode/coordinator/coordinator.py'
    """
    found = _FRAME.match(frame)
    return found["file"] if found is not None else frame


def source_package(path: str) -> str:
    """Where a source file belongs, as the profiles group their time: ``kvnode/<package>`` (or
    ``kvnode/<module>.py``), aiohttp, asyncio, uvloop, ``multidict/yarl``, ``builtins`` (cProfile's name
    for functions in C, ``~``) and ``other``. ``path`` is absolute (cProfile's) or as py-spy shortens it.

    >>> [source_package(name) for name in ("/r/kvnode/node/client_api.py", "/r/kvnode/metrics.py", "~",
    ...                                    "/v/site-packages/aiohttp/web.py", "/v/yarl/_url.py", "/usr/x.py")]
    ['kvnode/node', 'kvnode/metrics.py', 'builtins', 'aiohttp', 'multidict/yarl', 'other']
    >>> source_package("kvnode/replica/channel/client.py"), source_package("uvloop/__init__.py")
    ('kvnode/replica', 'uvloop')
    """
    if path == "~":
        return "builtins"
    rooted = "/" + path.lstrip("/")
    if "/kvnode/" in rooted:
        inside = rooted.rsplit("/kvnode/", 1)[1]
        return "kvnode/" + (inside.split("/", 1)[0] if "/" in inside else inside)
    for package in ("aiohttp", "asyncio", "uvloop"):
        if f"/{package}/" in rooted:
            return package
    return "multidict/yarl" if "/multidict/" in rooted or "/yarl/" in rooted else "other"


def is_waiting_frame(frame: str) -> bool:
    """Whether ``frame`` (``function (file:line)``, as py-spy and memory.short_path name them), when it is
    the innermost frame of a sample, means the thread was waiting rather than running Python code.

    >>> is_waiting_frame("Runner.run (asyncio/runners.py:86)"), is_waiting_frame("put (kvnode/x.py:3)")
    (True, False)
    """
    found = _FRAME.match(frame)
    if found is None:
        return False
    function = found["function"].rpartition(".")[2]
    return any(found["file"].endswith(suffix) and function in names for suffix, names in _WAITING_FRAMES)


@dataclass(frozen=True)
class SampleSplit:
    """One profile's samples by what the thread was doing, told by the innermost frame."""

    python: Stacks  # innermost frame is Python code other than a wait: the thread ran Python
    waiting: Stacks  # innermost frame is a wait (see is_waiting_frame): the loop's poll, a lock
    no_frame: int  # no Python frame at all (native-only samples): unknown

    @property
    def total(self) -> int:
        return sum(self.python.values()) + sum(self.waiting.values()) + self.no_frame

    @property
    def python_samples(self) -> int:
        return sum(self.python.values())

    @property
    def waiting_samples(self) -> int:
        return sum(self.waiting.values())


def split_samples(stacks: Mapping[tuple[str, ...], int]) -> SampleSplit:
    """Separate samples in Python code from waiting samples and from those without a Python frame.

    >>> loop = "main;Runner.run (asyncio/runners.py:86)"
    >>> split = split_samples(parse_collapsed(f"{loop} 7\\nmain;f (a.py:1) 3\\n 1\\n"))
    >>> split.python_samples, split.waiting_samples, split.no_frame
    (3, 7, 1)
    """
    python: Stacks = Counter()
    waiting: Stacks = Counter()
    no_frame = 0
    for stack, weight in stacks.items():
        if not stack or stack == (NO_PYTHON_FRAME,):
            no_frame += weight
        elif is_waiting_frame(stack[-1]):
            waiting[stack] += weight
        else:
            python[stack] += weight
    return SampleSplit(python, waiting, no_frame)
