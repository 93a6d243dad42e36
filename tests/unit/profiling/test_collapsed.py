"""Collapsed-stack parsing and the top-frame tables (profiling.collapsed) on small fixed inputs."""

from __future__ import annotations

import pytest

from profiling.collapsed import (
    NO_PYTHON_FRAME,
    CollapsedFormatError,
    FrameShare,
    format_collapsed,
    is_waiting_frame,
    merge,
    parse_collapsed,
    split_samples,
    top_frames,
    trunk,
)

# What py-spy --format raw --function writes: frames contain spaces, the count follows the last one.
TRUNK = "<module> (kvnode/__main__.py:1);run (uvloop/__init__.py:38);Runner.run (asyncio/runners.py:86)"
PUT = "put_entity (kvnode/node/client_api.py:54)"
PY_SPY_RAW = f"""\
{TRUNK} 60
{TRUNK};{PUT};Coordinator.put (kvnode/coordinator/coordinator.py:40) 25
{TRUNK};{PUT} 10

 5
"""


def shares(rows: list[FrameShare], attribute: str) -> list[tuple[str, float]]:
    return [(row.frame, round(getattr(row, attribute), 4)) for row in rows]


def test_parse_py_spy_raw() -> None:
    stacks = parse_collapsed(PY_SPY_RAW)
    assert sum(stacks.values()) == 100
    assert (
        stacks[
            (
                "<module> (kvnode/__main__.py:1)",
                "run (uvloop/__init__.py:38)",
                "Runner.run (asyncio/runners.py:86)",
            )
        ]
        == 60
    )
    assert stacks[(NO_PYTHON_FRAME,)] == 5  # py-spy's " 5": samples outside any Python frame


def test_equal_stacks_on_several_lines_add_up() -> None:
    assert parse_collapsed("a;b 2\na;b 3\n") == {("a", "b"): 5}


@pytest.mark.parametrize("line", ["a;b", "a;b x", "a;b -1"])
def test_bad_lines_are_rejected_with_their_number(line: str) -> None:
    with pytest.raises(CollapsedFormatError, match="line 2"):
        parse_collapsed(f"a 1\n{line}\n")


def test_self_and_total_shares() -> None:
    stacks = parse_collapsed(PY_SPY_RAW)
    by_self = top_frames(stacks, by="self")
    assert shares(by_self, "self_share") == [
        ("Runner.run (asyncio/runners.py:86)", 0.60),
        ("Coordinator.put (kvnode/coordinator/coordinator.py:40)", 0.25),
        ("put_entity (kvnode/node/client_api.py:54)", 0.10),
        (NO_PYTHON_FRAME, 0.05),
    ]
    by_total = top_frames(stacks, by="total", limit=4)
    assert shares(by_total, "total_share") == [
        ("<module> (kvnode/__main__.py:1)", 0.95),
        ("Runner.run (asyncio/runners.py:86)", 0.95),
        ("run (uvloop/__init__.py:38)", 0.95),
        ("put_entity (kvnode/node/client_api.py:54)", 0.35),
    ]
    put = next(row for row in by_total if row.frame.startswith("put_entity"))
    assert (put.self_weight, put.total_weight) == (10, 35)


def test_recursion_counts_once_per_stack_for_total() -> None:
    # walk calls itself: 4 samples with walk on the stack twice or three times, 1 without it.
    stacks = parse_collapsed("main;walk;walk;leaf 3\nmain;walk;walk;walk 1\nmain 1\n")
    rows = {row.frame: row for row in top_frames(stacks, by="total")}
    assert rows["walk"].total_weight == 4
    assert rows["walk"].total_share == pytest.approx(0.8)
    assert rows["walk"].self_weight == 1
    assert rows["main"].total_share == pytest.approx(1.0)


def test_ties_rank_by_name_and_limit_applies_after_dropping_zero_rows() -> None:
    stacks = parse_collapsed("root;b 2\nroot;a 2\nroot;c 1\n")
    assert [row.frame for row in top_frames(stacks, by="self", limit=2)] == ["a", "b"]
    # root is never innermost: it is not in the self table at all
    assert "root" not in [row.frame for row in top_frames(stacks, by="self")]


def test_empty_input_has_no_rows() -> None:
    assert top_frames(parse_collapsed(""), by="self") == []


def test_trunk_is_the_entry_path_down_to_where_stacks_branch() -> None:
    assert trunk(parse_collapsed(PY_SPY_RAW)) == TRUNK.split(";")
    # Runner.run has no child on 95% of its weight: the walk stops there, unless put_entity is.
    assert trunk(parse_collapsed(PY_SPY_RAW + f"{TRUNK};{PUT} 2000\n")) == [*TRUNK.split(";"), PUT]
    # A torn stack (starting mid-way) does not hide the trunk; no majority root means no trunk.
    assert trunk(parse_collapsed("main;loop;a 9\nloop;a 1\n")) == ["main", "loop", "a"]
    assert trunk(parse_collapsed("a 1\nb 1\nc 1\n")) == []


def test_format_round_trips_and_merge_adds() -> None:
    stacks = parse_collapsed(PY_SPY_RAW)
    assert parse_collapsed(format_collapsed(stacks)) == stacks
    assert sum(merge([stacks, stacks]).values()) == 200


@pytest.mark.parametrize(
    ("frame", "waiting"),
    [
        ("Runner.run (asyncio/runners.py:86)", True),  # uvloop's poll and C code, below asyncio.run
        ("run (uvloop/__init__.py:38)", True),
        ("BaseEventLoop._run_once (asyncio/base_events.py:1845)", True),  # the default loop
        ("BaseSelector.select (selectors.py:451)", True),
        ("EpollSelector.select (selectors.py:451)", True),
        ("Condition.wait (threading.py:295)", True),
        ("run (asyncio/runners.py)", True),  # memray's frames name no line
        ("put_entity (kvnode/node/client_api.py:54)", False),
        ("run (kvnode/node/app.py:12)", False),  # the name alone is not enough
        ("select (kvnode/selectors_of_mine.py:3)", False),
        (NO_PYTHON_FRAME, False),
    ],
)
def test_waiting_frames(frame: str, waiting: bool) -> None:
    assert is_waiting_frame(frame) is waiting


def test_split_samples_by_innermost_frame() -> None:
    split = split_samples(parse_collapsed(PY_SPY_RAW))
    assert (split.python_samples, split.waiting_samples, split.no_frame) == (35, 60, 5)
    assert split.total == 100
    # A waiting frame further out does not make a sample waiting: only the innermost frame counts.
    assert all(not is_waiting_frame(stack[-1]) for stack in split.python)
    assert sum(split.python.values()) == sum(top.self_weight for top in top_frames(split.python, by="self"))
