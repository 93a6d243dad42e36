"""A measurement under a constant-rate GET load cut into windows, which the healing, join and backup
scenarios share: a window's load and figures, their table, the plot of p99 per window, the command line
(keys, value size, rate, out) and the report written the one way (``NAME.json``, ``NAME-p99.png`` and
``NAME.md`` ending with the plot).

>>> window_table([Window("before", -5.0, 1.0, 2.5, 999.0, 0)], "from the wipe")[2]
'| before | -5 | 1.00 | 2.50 | 999 | 0 |'
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from loadtest.openloop import run_rate
from loadtest.workload import Workload

__all__ = ["WINDOW_S", "Window", "plot_p99", "run_measurement", "window", "window_table", "write_report"]

T = TypeVar("T")

WINDOW_S = 5.0


@dataclass
class Window:
    phase: str  # what the cluster was doing: before, and each scenario's own
    started_s: float  # since the scenario's event (negative before it)
    p50_ms: float
    p99_ms: float
    achieved: float
    errors: int


async def window(urls: list[str], keys: int, rate: float) -> tuple[float, float, float, int]:
    """One window of GET load: p50 and p99 (ms), the rate achieved, the requests that failed."""
    result = await run_rate(urls, Workload("get", keys, 100), rate, WINDOW_S, connections=32)
    return (
        result.latency.percentile_ms(50),
        result.latency.percentile_ms(99),
        result.achieved_rate,
        result.failed,
    )


def window_table(windows: Sequence[Any], since: str) -> list[str]:
    """A report's table of windows (``phase``, ``started_s``, ``p50_ms``, ``p99_ms``, ``achieved``,
    ``errors``), seconds counted ``since`` what its column says."""
    rows = [
        f"| {w.phase} | {w.started_s:.0f} | {w.p50_ms:.2f} | {w.p99_ms:.2f} | {w.achieved:.0f} | {w.errors} |"
        for w in windows
    ]
    return [
        f"| phase | {since} (s) | p50 (ms) | p99 (ms) | achieved (/s) | errors |",
        "|---|---|---|---|---|---|",
        *rows,
    ]


def plot_p99(windows: Sequence[Any], phases: Sequence[str], xlabel: str, title: str, path: Path) -> None:
    """p99 per window (``phase``, ``started_s``, ``p99_ms``), one colour per phase, from zero."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4))
    for phase, color in zip(phases, ("tab:blue", "tab:red", "tab:green"), strict=True):
        shown = [w for w in windows if w.phase == phase]
        axes.plot([w.started_s for w in shown], [w.p99_ms for w in shown], "o-", color=color, label=phase)
    axes.set_ylim(bottom=0)  # from zero, so a change looks as large as it is
    axes.set_xlabel(xlabel)
    axes.set_ylabel("GET p99 (ms)")
    axes.set_title(title, pad=12)
    axes.legend()
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write_report(
    out: Path,
    name: str,
    measured: Any,
    lines: list[str],
    plot: Callable[[Path], None],
    caption: str = "p99 per window",
) -> Path:
    """``measured`` (a dataclass) as ``NAME.json``, its plot (``plot(path)``) as ``NAME-p99.png``, and
    ``lines`` as ``NAME.md``, ending with the plot (``caption`` its alternative text); the report's path."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(asdict(measured), indent=2) + "\n")
    plot(out / f"{name}-p99.png")
    path = out / f"{name}.md"
    path.write_text("\n".join([*lines, "", f"![{caption}]({name}-p99.png)", ""]))
    return path


def run_measurement(
    name: str,
    doc: str,
    argv: list[str],
    command: str,
    measure: Callable[[int, int, float, Callable[[str], None]], T],
    report: Callable[[T, Path, str], Path],
) -> int:
    """``python -m loadtest NAME``'s flags (keys, value size, rate, out), its measurement and its report."""
    parser = argparse.ArgumentParser(prog=f"python -m loadtest {name}", description=doc.split("\n")[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--rate", type=float, default=1000.0, help="GET per second during the run")
    parser.add_argument("--out", type=Path, default=Path(f"out/{name}"))
    args = parser.parse_args(argv)
    measured = measure(args.keys, args.value_size, args.rate, lambda line: print(line, flush=True))
    print(f"report: {report(measured, args.out, command)}")
    return 0
