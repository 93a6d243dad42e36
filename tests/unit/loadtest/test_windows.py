"""loadtest.windows: a windowed measurement's report written the one way (its JSON, its plot, its Markdown
ending with the plot), and its table of windows."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from loadtest.windows import Window, window_table, write_report


@dataclass
class Measured:
    keys: int
    windows: list[Window] = field(default_factory=list)


def test_a_report_is_its_json_its_plot_and_its_lines_ending_with_the_plot(tmp_path: Path) -> None:
    measured = Measured(10, [Window("before", -5.0, 1.0, 2.0, 100.0, 0)])
    plotted: list[Path] = []
    path = write_report(tmp_path / "out", "demo", measured, ["# Demo", "text"], plotted.append)
    assert path == tmp_path / "out" / "demo.md"
    assert path.read_text() == "# Demo\ntext\n\n![p99 per window](demo-p99.png)\n"
    assert plotted == [tmp_path / "out" / "demo-p99.png"]
    assert json.loads((tmp_path / "out" / "demo.json").read_text())["windows"][0]["phase"] == "before"


def test_the_table_has_a_row_per_window_seconds_counted_since_what_it_says() -> None:
    table = window_table([Window("joining", 10.0, 1.234, 5.678, 998.6, 2)], "from its start")
    assert table == [
        "| phase | from its start (s) | p50 (ms) | p99 (ms) | achieved (/s) | errors |",
        "|---|---|---|---|---|---|",
        "| joining | 10 | 1.23 | 5.68 | 999 | 2 |",
    ]
