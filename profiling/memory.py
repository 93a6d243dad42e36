"""memray captures: what was allocated during the load, as collapsed stacks.

A capture holds the node's whole life, imports and start-up included; the allocations made while the
load ran are cut out of it (see load_window_allocations) and become collapsed stacks weighted by count
and by bytes, drawn (profiling.flamegraph) and ranked by the same tables as py-spy's samples. memray's
own HTML pages are left out: they draw the whole capture, start-up included, and weigh megabytes each;
``memray flamegraph CAPTURE`` draws one from a run's kept capture.
"""

from __future__ import annotations

import functools
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import memray

import kvnode
from profiling.collapsed import NO_PYTHON_FRAME, Stacks, trunk

__all__ = ["Allocations", "by_innermost_kvnode_frame", "load_window_allocations", "short_path"]

WINDOW_MARKER = "get_stats"  # kvnode.node.stats's /v0/stats handler, called at load start and end
_ALLOCATING = frozenset(
    kind for name, kind in memray.AllocatorType.__members__.items() if not name.endswith(("FREE", "MUNMAP"))
)


@dataclass
class Allocations:
    """Allocations made during the load, by stack (root first), weighted by count and by bytes."""

    by_count: Stacks
    by_bytes: Stacks
    windowed: bool  # False: no load marks were found, the whole capture is counted

    @property
    def count(self) -> int:
        return sum(self.by_count.values())

    @property
    def bytes(self) -> int:
        return sum(self.by_bytes.values())


@functools.cache
def short_path(filename: str) -> str:
    """A source path relative to the sys.path entry it was imported from, as py-spy shows them."""
    # kvnode is an editable install found by a finder, not through sys.path: add its checkout too.
    checkout = str(Path(kvnode.__file__).resolve().parent.parent)
    roots = sorted({entry for entry in [*sys.path, checkout] if entry}, key=len, reverse=True)
    for root in roots:
        prefix = root.rstrip("/") + "/"
        if filename.startswith(prefix):
            return filename[len(prefix) :]
    return filename


@functools.cache
def _frame_name(function: str, filename: str) -> str:
    return f"{function} ({short_path(filename)})"


def load_window_allocations(capture: Path, marker: str = WINDOW_MARKER) -> Allocations:
    """Allocations made between the first and the last allocation under ``marker`` in a memray capture.

    memray stamps no time on an allocation, but its records are in order, and the profiler calls the
    node's /v0/stats (whose handler is the marker) just before the load starts and just after it ends.
    Allocations under the marker itself are left out. Without two marks the whole capture is counted,
    and ``windowed`` is False. Frames are
    ``function (file)`` without the line: one frame per function, like py-spy's --function.
    """
    reader = memray.FileReader(str(capture))
    stacks: list[tuple[str, ...] | None] = []  # by stack id, filled as ids are met
    marked: list[bool] = []
    # Running sums by stack id, copied when the first mark begins and when each mark ends: the window is
    # the difference, without keeping millions of records (a capture of a few seconds holds millions).
    counts: list[int] = []
    sizes: list[int] = []
    start: tuple[list[int], list[int]] | None = None
    end: tuple[list[int], list[int]] | None = None
    mark_runs = 0  # groups of consecutive marker allocations: one or a few per /v0/stats request
    in_mark = False
    try:
        for record in reader.get_allocation_records():
            if record.allocator not in _ALLOCATING:
                continue
            stack_id = record.stack_id
            if stack_id >= len(stacks):
                grow = stack_id + 1 - len(stacks)
                stacks += [None] * grow
                marked += [False] * grow
                counts += [0] * grow
                sizes += [0] * grow
            if stacks[stack_id] is None:
                trace = record.stack_trace()
                stacks[stack_id] = tuple(
                    _frame_name(function, filename) for function, filename, _line in reversed(trace)
                ) or (NO_PYTHON_FRAME,)
                marked[stack_id] = any(function == marker for function, _filename, _line in trace)
            is_mark = marked[stack_id]
            if is_mark != in_mark:
                if is_mark:
                    mark_runs += 1
                    if start is None:
                        start = (counts.copy(), sizes.copy())
                else:
                    end = (counts.copy(), sizes.copy())
                in_mark = is_mark
            counts[stack_id] += record.n_allocations
            sizes[stack_id] += record.size
    finally:
        reader.close()
    if in_mark:
        end = (counts.copy(), sizes.copy())
    windowed = mark_runs >= 2 and start is not None and end is not None
    first = start if windowed and start is not None else ([], [])
    last = end if windowed and end is not None else (counts, sizes)
    by_count: Stacks = Counter()
    by_bytes: Stacks = Counter()
    for stack_id, stack in enumerate(stacks):
        # The marker's own allocations are the profiler's /v0/stats calls, not the load's.
        if stack is None or stack_id >= len(last[0]) or marked[stack_id]:
            continue
        count = last[0][stack_id] - (first[0][stack_id] if stack_id < len(first[0]) else 0)
        size = last[1][stack_id] - (first[1][stack_id] if stack_id < len(first[1]) else 0)
        if count > 0:
            by_count[stack] += count
            by_bytes[stack] += size
    return Allocations(by_count, by_bytes, windowed)


def by_innermost_kvnode_frame(stacks: Stacks) -> Counter[str]:
    """Weights by the innermost kvnode frame of each stack (what a kvnode function allocates, the
    libraries it calls included), or by its innermost frame where none is (aiohttp's and asyncio's own
    work). The node's entry path, which every stack runs under (collapsed.trunk), is no kvnode frame here.

    >>> by_innermost_kvnode_frame(Counter({("main (kvnode/m.py)", "put (kvnode/x.py)", "join (b.py)"): 3,
    ...                                    ("main (kvnode/m.py)", "parse (aiohttp/p.py)"): 2}))
    Counter({'put (kvnode/x.py)': 3, 'parse (aiohttp/p.py)': 2})
    """
    entry = set(trunk(stacks))
    found: Counter[str] = Counter()
    for stack, weight in stacks.items():
        kvnode = (frame for frame in reversed(stack) if "(kvnode/" in frame and frame not in entry)
        found[next(kvnode, stack[-1])] += weight
    return found
