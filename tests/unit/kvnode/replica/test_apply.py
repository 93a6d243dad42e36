"""kvnode.replica.apply: a version is stored if newer, an older one answered with the newer timestamp, and
one stamped beyond the maximum skew refused and never stored."""

from __future__ import annotations

from pathlib import Path

from kvnode.clocks.hybrid import wall_clock_us
from kvnode.replica.apply import Applied, apply_record
from kvnode.storage.keyspace import Storage
from kvnode.storage.records import Record
from tests.harness import group_written
from tests.replicas import unjudged_fence


def test_a_newer_version_is_stored_an_older_one_names_the_newer(tmp_path: Path) -> None:
    storage = Storage.open(tmp_path, fsync=False)
    fence = unjudged_fence()
    now = wall_clock_us()()
    assert apply_record(storage.apply, fence, b"k", Record(now, False, b"new")) == Applied()
    assert apply_record(storage.apply, fence, b"k", Record(now - 1, False, b"old")) == Applied(newer=now)
    assert storage.read(b"k") == Record(now, False, b"new")
    storage.close()


def test_a_version_beyond_the_skew_is_refused_and_not_stored(tmp_path: Path) -> None:
    storage = Storage.open(tmp_path, fsync=False)
    fence = unjudged_fence()
    ahead = wall_clock_us()() + fence.max_skew_us + 60_000_000
    applied = apply_record(storage.apply, fence, b"k", Record(ahead, False, b"from the future"))
    assert applied.refused.startswith(f"record stamped {ahead} is beyond the maximum clock skew")
    assert storage.read(b"k") is None
    storage.close()


async def test_a_write_offered_to_the_group_commit_stores_through_the_same_path(tmp_path: Path) -> None:
    storage = Storage.open(tmp_path, fsync=False)
    assert apply_record(storage.offer, unjudged_fence(), b"k", Record(1, True, b"")) == Applied()
    await group_written(storage.when_written)
    assert storage.read(b"k") == Record(1, True, b"")
    storage.close()
