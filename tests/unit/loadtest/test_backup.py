"""The backup measurement's report: what its samples say, drawn from a run's figures."""

from __future__ import annotations

from pathlib import Path

from loadtest.backup import BackupCost, Step, report
from loadtest.windows import Window


def _cost() -> BackupCost:
    cost = BackupCost(keys=1000, value_size=100, rate=200.0, cores=2, fill_s=1.5, read_back=200)
    cost.windows = [
        Window("before", 0.0, 1.0, 4.0, 200.0, 0),
        Window("backup", 5.0, 2.0, 9.5, 199.0, 0),
        Window("restore", 10.0, 1.5, 7.25, 200.0, 1),
    ]
    cost.backup = Step(3.2, {"keys": 1000, "bytes": 129_000, "seconds": 3.2})
    cost.live_restore = Step(4.1, {"restored": 1000, "kept_newer": 0, "skipped": 0, "failed": 0})
    cost.recovery = Step(2.0, {"restored": 1000, "kept_newer": 0, "skipped": 0, "failed": 0})
    return cost


def test_the_report_states_each_steps_time_and_the_p99_of_every_window(tmp_path: Path) -> None:
    text = report(_cost(), tmp_path, "python -m loadtest backup --keys 1000").read_text()
    assert "**Backup: 3.2 s** for 1000 keys (129000 bytes)" in text
    assert "**Restore into the live cluster: 4.1 s** (1000 written" in text
    assert "**Restore into a fresh empty cluster: 2.0 s**" in text and "200 of 200 sampled keys" in text
    assert "p99 before: 4.00 ms; during the backup: 9.50 ms; during the live restore: 7.25 ms" in text
    assert "3 windows: 1 before, 1 while the backup ran, 1 while the live restore ran" in text
    assert "| restore | 10 | 1.50 | 7.25 | 200 | 1 |" in text
    assert (tmp_path / "backup-p99.png").stat().st_size > 0
    assert (tmp_path / "backup.json").exists()
