"""A check's ``report.md``: the overall verdict, each checker's verdict with its counts and problems, the
faults and their windows (and those skipped), the operations by outcome with their latency, the plots, and
the command (with its seed) that runs the check again. A pure function of the run's :class:`Summary`.

>>> percentile([5, 1, 4, 2, 3], 0.5), percentile([5, 1, 4, 2, 3], 0.99), percentile([], 0.5)
(3, 5, None)
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from kvnode.check.history import Call, Op, calls
from kvnode.check.nemesis import Fault
from kvnode.check.verdict import Verdict, exit_status

__all__ = ["Summary", "percentile", "render"]

_PROBLEMS_SHOWN = 50  # per checker; the history has every operation
_WORDS = {0: "valid", 1: "INVALID", 2: "unknown"}


@dataclass(frozen=True)
class Summary:
    """What one run did and found."""

    command: str
    seed: int
    where: str
    seconds: float
    ops: Sequence[Op]
    verdicts: Sequence[Verdict]
    faults: Sequence[Fault]
    skipped: Sequence[str] = ()
    errors: Sequence[str] = ()
    plots: Sequence[str] = ()  # file names beside the report
    plots_missing: str = ""  # why there are none


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """The nearest-rank percentile (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def _ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.1f}"


def _seconds(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e9:.1f}"


def render(summary: Summary) -> str:
    done = calls(summary.ops)
    by_type = Counter(call.type for call in done)
    word = _WORDS[exit_status(summary.verdicts)]
    lines = [
        f"# kvnode check: {word}",
        "",
        f"Checked {summary.where} for {summary.seconds:.0f} s: {len(done)} operations ({by_type['ok']} ok, "
        f"{by_type['fail']} failed, {by_type['info']} of unknown outcome) and "
        f"{_faults_injected(summary.faults)}.",
        "",
        f"Run it again (seed {summary.seed}): `{summary.command}`",
        "",
        "## Verdicts",
        "",
        "| checker | verdict | counts |",
        "|---|---|---|",
        *(
            f"| {v.checker} | {v.word} | {', '.join(f'{k} {n}' for k, n in v.counts.items())} |"
            for v in summary.verdicts
        ),
        *_problems(summary.verdicts),
        "",
        *_faults(summary),
        "",
        *_operations(done),
        "",
        *_plots(summary),
        "",
        "The history is in `history.jsonl`, one JSON object a line as Jepsen records one: `index`, "
        "`process`, "
        "`type` (invoke, ok, fail, info), `f`, `key`, `value`, `time` (ns since the check began), and what "
        "the client saw (`node`, `status`, `error`, `etag`). See docs/check.md.",
    ]
    return "\n".join(lines) + "\n"


def _faults_injected(faults: Sequence[Fault]) -> str:
    return "no fault" if not faults else f"{len(faults)} fault" + ("s" if len(faults) > 1 else "")


def _problems(verdicts: Sequence[Verdict]) -> list[str]:
    lines = []
    for verdict in verdicts:
        if not verdict.problems:
            continue
        lines += ["", f"### {verdict.checker}: {verdict.word}", ""]
        lines += [f"- {problem}" for problem in verdict.problems[:_PROBLEMS_SHOWN]]
        if len(verdict.problems) > _PROBLEMS_SHOWN:
            lines.append(f"- and {len(verdict.problems) - _PROBLEMS_SHOWN} more")
    return lines


def _faults(summary: Summary) -> list[str]:
    lines = ["## Faults", ""]
    if summary.faults:
        lines += ["| kind | target | from (s) | to (s) | what |", "|---|---|---|---|---|"]
        lines += [
            f"| {f.kind} | {f.target} | {_seconds(f.started)} | {_seconds(f.ended)} | {f.note} |"
            for f in summary.faults
        ]
    else:
        lines.append("None injected.")
    lines += [f"- {line}" for line in (*summary.skipped, *summary.errors)]
    return lines


def _operations(done: Sequence[Call]) -> list[str]:
    lines = [
        "## Operations and latency (ms)",
        "",
        "| operation | outcome | count | p50 | p99 | max |",
        "|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for call in done:
        latency = call.latency_ns
        groups[call.f, call.type].append(latency if latency is not None else 0)
    for (f, outcome), latencies in sorted(groups.items()):
        p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
        lines.append(
            f"| {f} | {outcome} | {len(latencies)} | {_ms(p50)} | {_ms(p99)} | {_ms(max(latencies))} |"
        )
    return lines


def _plots(summary: Summary) -> list[str]:
    lines = ["## Plots", ""]
    if summary.plots_missing:
        return [*lines, f"None drawn: {summary.plots_missing}"]
    return lines + [f"![{name}]({name})" for name in summary.plots]
