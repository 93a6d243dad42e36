"""loadtest.scale: the shapes its flags ask for, its one-line refusals, and a short run end to end on real
nodes (test_scale_report checks the report's words)."""

from __future__ import annotations

import os

import pytest

from loadtest.scale import main, shapes_from
from loadtest.scale_figures import Shape


def test_the_shapes_are_member_counts_on_hosts_of_a_member_a_core_or_machines_of_each_size() -> None:
    cores = os.cpu_count() or 1
    assert shapes_from(None, None, None) == [Shape(3, cores), Shape(6, cores), Shape(12, cores)]
    assert shapes_from([3, 12, 3], None, [2]) == [Shape(3, 2), Shape(12, 2)]
    assert shapes_from(None, 3, None) == [Shape(3, 1), Shape(12, 4)]  # 3 machines of 1, then of 4
    assert [shape.hosts for shape in shapes_from(None, 3, [1, 4])] == [3, 3]


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--members", "2,6"], "every shape needs at least --replication-factor 3 members, got 2"),
        (["--members", "3", "--machines", "3"], "--members and --machines exclude each other"),
        (["--members", "3,6", "--per-host", "1,2"], "with --members, --per-host is one number"),
        (["--members", "3,x"], "argument --members: not an integer: 'x'"),
    ],
)
def test_bad_flags_are_refused_in_one_line(
    argv: list[str], reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit:
        main(argv, "python -m loadtest scale")
    assert exit.value.code == 2
    error = capsys.readouterr().err
    assert reason in error and error.count("\n") == 1
