"""kvnode.healing.gc_rule: when a tombstone, an expired version or a surplus copy may be dropped, pure."""

from __future__ import annotations

from kvnode.healing.gc_rule import GcRule, Outcome, Verdict
from kvnode.storage.records import Record
from kvnode.topology.placement import Placement

A, B, C, D = "http://a:1", "http://b:1", "http://c:1", "http://d:1"
PLACEMENT = Placement([A, B, C, D])
GRACE, ARRIVAL = 1_000, 100
RULE = GcRule(A, PLACEMENT, grace_us=GRACE, arrival_us=ARRIVAL)


def marks(**completed: int) -> dict[str, int]:
    """Every peer's last completed repair, started at 0 unless given (b=..., c=..., d=...)."""
    return {url: completed.get(url[7], 0) for url in (B, C, D)}


def judge(record: Record, now: int, completed: dict[str, int], key: bytes = b"k") -> Verdict:
    return RULE.judge(key, record, now=now, completed=completed.__getitem__)


def test_a_live_version_is_kept_however_old_and_repaired() -> None:
    everyone = marks(b=10**9, c=10**9, d=10**9)
    assert judge(Record.put(5, b"v"), 10**8, everyone).outcome is Outcome.KEEP
    assert judge(Record.put(5, b"v", ttl_us=10**9), 10**8, everyone).outcome is Outcome.KEEP


def test_a_tombstone_is_kept_through_its_grace_period_past_its_latest_arrival_and_dropped_after() -> None:
    tombstone = Record.delete(5_000)
    repaired = marks(b=5_000 + ARRIVAL + 1, c=5_000 + ARRIVAL + 1, d=5_000 + ARRIVAL + 1)
    assert judge(tombstone, 5_000 + ARRIVAL + GRACE, repaired).outcome is Outcome.KEEP
    assert judge(tombstone, 5_000 + ARRIVAL + GRACE + 1, repaired).outcome is Outcome.DROP


def test_a_tombstone_waits_for_every_replica_whose_repair_started_before_it_could_have_arrived() -> None:
    tombstone = Record.delete(5_000)
    reached_by = 5_000 + ARRIVAL
    completed = marks(b=reached_by + 1, c=reached_by, d=0)
    assert judge(tombstone, 10**6, completed) == Verdict(Outcome.WAIT, (C, D))
    completed[C] = completed[D] = reached_by + 1
    assert judge(tombstone, 10**6, completed).outcome is Outcome.DROP


def test_an_expired_version_counts_its_grace_from_its_expiry_and_needs_repairs_since_its_write() -> None:
    expiring = Record.put(5_000, b"v", ttl_us=3_000)  # expires at 8_000
    repaired = marks(b=5_000 + ARRIVAL + 1, c=5_000 + ARRIVAL + 1, d=5_000 + ARRIVAL + 1)
    assert judge(expiring, 8_000 + ARRIVAL + GRACE, repaired).outcome is Outcome.KEEP
    assert judge(expiring, 8_000 + ARRIVAL + GRACE + 1, repaired).outcome is Outcome.DROP
    assert judge(expiring, 8_000 + ARRIVAL + GRACE + 1, marks()) == Verdict(Outcome.WAIT, (B, C, D))


def test_a_version_written_to_fewer_replicas_waits_only_for_those() -> None:
    key = next(b"key-%d" % i for i in range(1000) if PLACEMENT.replicas_for(b"key-%d" % i, 2)[0] == A)
    other = PLACEMENT.replicas_for(key, 2)[1]
    tombstone = Record.delete(5_000, copies=2)
    assert judge(tombstone, 10**6, marks(), key) == Verdict(Outcome.WAIT, (other,))
    assert judge(tombstone, 10**6, {**marks(), other: 10**5}, key).outcome is Outcome.DROP


UNOWNED_KEY = next(b"key-%d" % i for i in range(1000) if A not in PLACEMENT.replicas_for(b"key-%d" % i, 2))
SETTLED = 50_000
SETTLED_RULE = GcRule(A, PLACEMENT, grace_us=GRACE, arrival_us=ARRIVAL, settled_since=SETTLED)


def surplus(record: Record, now: int, *, cleanup: bool = False, rule: GcRule = SETTLED_RULE) -> Outcome:
    """The verdict on a version of a key this node does not own (written to 2 replicas, A not one)."""
    everyone = marks(b=10**9, c=10**9, d=10**9)
    return rule.judge(UNOWNED_KEY, record, now=now, completed=everyone.__getitem__, cleanup=cleanup).outcome


def test_a_version_this_node_should_not_hold_is_surplus_kept_while_a_change_is_under_way() -> None:
    for cleanup in (False, True):
        for record in (Record.put(5_000, b"v", copies=2), Record.delete(5_000, copies=2)):
            assert surplus(record, 10**9, cleanup=cleanup, rule=RULE) is Outcome.SURPLUS


def test_a_surplus_copy_may_go_once_the_membership_has_been_settled_past_the_grace_period() -> None:
    for record in (Record.put(5_000, b"v", copies=2), Record.delete(5_000, copies=2)):
        assert surplus(record, SETTLED + GRACE + ARRIVAL) is Outcome.SURPLUS
        assert surplus(record, SETTLED + GRACE + ARRIVAL + 1) is Outcome.UNOWNED


def test_a_cleanup_lets_a_live_surplus_copy_go_at_once_and_keeps_the_grace_of_what_reads_as_absent() -> None:
    assert surplus(Record.put(SETTLED + 1, b"v", copies=2), SETTLED + 2, cleanup=True) is Outcome.UNOWNED
    expiring = Record.put(SETTLED - 10, b"v", copies=2, ttl_us=100)  # expired by SETTLED + 90
    assert surplus(expiring, SETTLED + 50, cleanup=True) is Outcome.UNOWNED  # live still
    for absent in (expiring, Record.delete(SETTLED - 10, copies=2)):
        assert surplus(absent, SETTLED + 100, cleanup=True) is Outcome.SURPLUS
        assert surplus(absent, SETTLED + GRACE + ARRIVAL + 1, cleanup=True) is Outcome.UNOWNED


def test_a_cleanup_judges_the_versions_this_node_owns_as_gc_does() -> None:
    repaired = marks(b=5_000 + ARRIVAL + 1, c=5_000 + ARRIVAL + 1, d=5_000 + ARRIVAL + 1)
    for record, now in ((Record.put(5, b"v"), 10**8), (Record.delete(5_000), 5_000 + ARRIVAL + GRACE)):
        for cleanup in (False, True):
            verdict = SETTLED_RULE.judge(
                b"k", record, now=now, completed=repaired.__getitem__, cleanup=cleanup
            )
            assert verdict.outcome is Outcome.KEEP


def test_a_cluster_of_one_drops_once_the_grace_period_is_over() -> None:
    alone = GcRule(A, Placement([A]), grace_us=GRACE, arrival_us=ARRIVAL)
    assert alone.judge(
        b"k", Record.delete(5), now=6 + ARRIVAL + GRACE, completed=marks().__getitem__
    ).outcome is (Outcome.DROP)
