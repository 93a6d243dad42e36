"""kvnode.healing.cleanup_run: a cleanup's progress and summary, pure."""

from __future__ import annotations

from kvnode.healing.cleanup_run import CleanupRun

B, C = "http://b:1", "http://c:1"


def test_a_run_under_way_is_not_done_and_says_what_it_has_done_so_far() -> None:
    run = CleanupRun(started=0.0)
    run.scanned, run.dropped, run.bytes = 500, 3, 300
    shown = run.to_json()
    assert (shown["done"], shown["completed"], shown["scanned"], shown["dropped"]) == (False, False, 500, 3)
    assert shown["summary"].startswith("3 surplus copies dropped (300 bytes) of 500 versions read; in ")


def test_a_run_completes_when_no_live_surplus_copy_was_kept() -> None:
    run = CleanupRun(started=1.0, ended=3.0, scanned=10, dropped=4, bytes=400, kept_in_grace=2)
    assert run.completed
    assert run.summary() == (
        "4 surplus copies dropped (400 bytes) of 10 versions read, 2 tombstones and expired values kept for "
        "their grace period; in 2.0 s"
    )


def test_copies_kept_for_an_owner_a_change_or_a_storage_failure_leave_it_incomplete_and_say_why() -> None:
    run = CleanupRun(started=0.0, ended=1.0, scanned=10)
    run.not_confirmed((C,))
    run.not_confirmed((B, C))
    assert not run.completed and run.to_json()["unconfirmed_by"] == {B: 1, C: 2}
    assert run.summary() == (
        f"0 surplus copies dropped (0 bytes) of 10 versions read; 2 kept: not confirmed by {B} (1), {C} (2); "
        "in 1.0 s"
    )
    changed = CleanupRun(started=0.0, ended=1.0, kept_for_change=5)
    assert not changed.completed and "5 kept: a membership change began" in changed.summary()
    failed = CleanupRun(started=0.0, ended=1.0, failed="disk full")
    assert not failed.completed and "; stopped: disk full; in 1.0 s" in failed.summary()
