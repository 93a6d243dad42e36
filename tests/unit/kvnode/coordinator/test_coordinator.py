"""kvnode.coordinator.coordinator in-process: a Coordinator over this node's real LocalReplica and two
scripted peers, each on real Storage in tmp_path, driven through quorum verdicts, hints for missed writes and
the rewrite after a NEWER answer, in every fan-out mode; and the order a speculative read asks a key's
replicas
in (nearest_first)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import get_args

import pytest

from kvnode.config import FanoutMode, ReplicationFactor
from kvnode.coordinator import coordinator as coordinator_module
from kvnode.coordinator.coordinator import nearest_first
from kvnode.coordinator.fanout import QuorumFailed
from kvnode.coordinator.quorum import BadQuorum, Group, Quorum
from kvnode.replica.errors import (
    ReplicaDiskFull,
    ReplicaError,
    ReplicaProtocolError,
    ReplicaRejected,
    ReplicaSkewRefused,
    ReplicaTimeout,
    ReplicaUnavailable,
)
from kvnode.storage import group_commit
from kvnode.storage.records import Record, encode
from kvnode.topology.epoch import Epoch
from kvnode.topology.membership import Membership
from tests.replicas import URLS, coordinator_node, run_callbacks

ALL = Quorum(ack=2, copies=3)
MODES: tuple[FanoutMode, ...] = get_args(FanoutMode)


# --- quorum verdicts ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("fanout", MODES)
async def test_a_write_reaches_every_replica_and_a_read_answers_it(
    tmp_path: Path, fanout: FanoutMode
) -> None:
    with coordinator_node(tmp_path, fanout) as node:
        await node.coordinator.put(b"k", b"v1", ALL)
        assert {url: node.held(url, b"k") is not None for url in URLS} == dict.fromkeys(URLS, True)
        found = await node.coordinator.get(b"k", ALL)
        assert found is not None and found.value == b"v1"
        await node.coordinator.delete(b"k", Quorum(ack=3, copies=3))
        found = await node.coordinator.get(b"k", ALL)
        assert found is not None and found.tombstone  # the HTTP layer answers 404 for it
        assert await node.coordinator.get(b"absent", ALL) is None


@pytest.mark.parametrize("fanout", MODES)
async def test_one_failed_replica_still_makes_a_quorum_and_two_do_not(
    tmp_path: Path, fanout: FanoutMode
) -> None:
    with coordinator_node(tmp_path, fanout) as node:
        node.c.fail_with = ReplicaUnavailable("http://c:1 is unreachable: refused")
        await node.coordinator.put(b"k", b"v", ALL)
        assert (await node.coordinator.get(b"k", ALL)) is not None
        node.b.fail_with = ReplicaTimeout("http://b:1 did not answer within 1s")
        # A parallel write fails once ack is out of reach: before this node's group commit answers.
        answered = 1 if fanout == "sync" else 0
        with pytest.raises(QuorumFailed, match=f"{answered} of 3 replicas answered, 2 needed") as failed:
            await node.coordinator.put(b"k", b"v2", ALL)
        assert "http://b:1 did not answer" in str(failed.value) and "http://c:1" in str(failed.value)
        with pytest.raises(QuorumFailed):
            await node.coordinator.get(b"k", ALL)
        assert (await node.coordinator.get(b"k", Quorum(ack=1, copies=3))) is not None


async def test_a_write_encodes_its_record_once_for_all_its_replicas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded: list[Record] = []

    def counted(record: Record) -> bytes:
        encoded.append(record)
        return encode(record)

    def again(record: Record) -> bytes:
        raise AssertionError(f"{record} encoded again by a replica")

    monkeypatch.setattr(coordinator_module, "encode", counted)
    monkeypatch.setattr(group_commit, "encode", again)
    with coordinator_node(tmp_path) as node:
        written = await node.coordinator.put(b"k", b"v", ALL)
        await run_callbacks()
        assert encoded == [written]
        assert all(node.storages[url].read_encoded(b"k") == encode(written) for url in URLS)


# --- hints for missed writes -------------------------------------------------------------------------------


async def test_a_replica_not_connected_is_hinted_before_the_answer_and_unhinted_if_the_write_lands(
    tmp_path: Path,
) -> None:
    with coordinator_node(tmp_path) as node:
        node.c.connected, node.c.holding = False, True
        await node.coordinator.put(b"k", b"v", ALL)
        assert node.hints.pending(URLS[2]) == 1  # kept before the client was answered
        node.c.release()  # its write landed after all
        await run_callbacks()
        assert node.hints.pending(URLS[2]) == 0
        assert node.held(URLS[2], b"k") is not None


async def test_a_replica_not_connected_whose_write_fails_keeps_one_hint(tmp_path: Path) -> None:
    with coordinator_node(tmp_path) as node:
        node.c.connected = False
        node.c.fail_with = ReplicaUnavailable("http://c:1 is unreachable: refused")
        await node.coordinator.put(b"k", b"v", ALL)
        assert node.hints.pending(URLS[2]) == 1
        assert [hint.key for hint in node.hints.oldest(URLS[2], 10)] == [b"k"]


async def test_a_connected_replica_that_fails_after_the_answer_is_hinted_then(tmp_path: Path) -> None:
    with coordinator_node(tmp_path) as node:
        node.c.holding = True
        await node.coordinator.put(b"k", b"v", ALL)
        assert node.hints.pending(URLS[2]) == 0
        node.c.release(ReplicaTimeout("http://c:1 did not answer within 1s"))
        await run_callbacks()
        assert node.hints.pending(URLS[2]) == 1
        assert node.hints.pending(URLS[1]) == 0


async def test_a_write_refused_for_clock_skew_is_counted_not_hinted(tmp_path: Path) -> None:
    with coordinator_node(tmp_path) as node:
        node.c.fail_with = ReplicaSkewRefused("http://c:1: record stamped beyond the maximum clock skew")
        await node.coordinator.put(b"k", b"v", ALL)
        await run_callbacks()
        assert node.coordinator.stats.skew_refusals == 1
        assert node.hints.pending(URLS[2]) == 0


@pytest.mark.parametrize(
    ("refusal", "kept"),
    [
        (ReplicaDiskFull("http://c:1: disk full: No space left on device"), 1),
        (ReplicaRejected("http://c:1: IO error: Input/output error"), 1),
        (ReplicaProtocolError("http://c:1: unexpected WebSocket opcode 1"), 0),
    ],
)
async def test_a_write_refused_for_the_replicas_own_state_is_hinted(
    tmp_path: Path, refusal: ReplicaError, kept: int
) -> None:
    with coordinator_node(tmp_path) as node:
        # A copy: raised, the shared parameter would keep this test's storages (in its traceback's frames)
        # until the interpreter exits, and LevelDB objects freed that late report errors.
        node.c.fail_with = copy.copy(refusal)
        await node.coordinator.put(b"k", b"v", ALL)
        await run_callbacks()
        assert node.hints.pending(URLS[2]) == kept


# --- the rewrite after a NEWER answer ----------------------------------------------------------------------


@pytest.mark.parametrize("fanout", MODES)
async def test_a_write_that_lost_to_a_newer_version_is_stamped_past_it_and_written_again(
    tmp_path: Path, fanout: FanoutMode
) -> None:
    with coordinator_node(tmp_path, fanout) as node:
        ahead = node.clock.now() + 1_000_000  # a version from a node whose clock runs 1 s ahead
        node.storages[URLS[1]].apply(b"k", Record.put(ahead, b"from the future"))
        await node.coordinator.put(b"k", b"latest", ALL)
        assert node.coordinator.stats.rewrites == 1
        for url in URLS:
            held = node.held(url, b"k")
            assert held is not None and held.value == b"latest" and held.timestamp > ahead, url
        assert [record.timestamp > ahead for _, record in node.b.writes] == [False, True]


async def test_a_rewrite_counts_the_ttl_from_its_new_timestamp(tmp_path: Path) -> None:
    with coordinator_node(tmp_path) as node:
        ahead = node.clock.now() + 1_000_000
        node.storages[URLS[1]].apply(b"k", Record.put(ahead, b"from the future"))
        await node.coordinator.put(b"k", b"brief", ALL, ttl_ms=300)
        assert node.coordinator.stats.rewrites == 1
        for url in URLS:
            held = node.held(url, b"k")
            assert held is not None and held.value == b"brief" and held.timestamp > ahead, url
            assert held.expires == held.timestamp + 300_000, url


# --- a version written as it is (a restore) ----------------------------------------------------------------


async def test_a_version_written_as_it_is_keeps_its_timestamp_and_loses_to_a_newer_one(
    tmp_path: Path,
) -> None:
    with coordinator_node(tmp_path) as node:
        old = Record.put(node.clock.now() - 5_000_000, b"backed up")
        newer = Record.put(old.timestamp + 1, b"written since")
        node.storages[URLS[1]].apply(b"k", newer)
        assert await node.coordinator.write_version(b"k", old) is True  # a and c took it
        assert [node.held(url, b"k") for url in URLS] == [old, newer, old]
        assert node.coordinator.stats.rewrites == 0  # never stamped again
        for url in (URLS[0], URLS[2]):
            node.storages[url].apply(b"k", newer)
        assert await node.coordinator.write_version(b"k", old) is False  # every owner holds a newer one


async def test_a_version_written_as_it_is_needs_every_owner_and_hints_the_one_that_missed_it(
    tmp_path: Path,
) -> None:
    with coordinator_node(tmp_path) as node:
        node.c.fail_with = ReplicaUnavailable("http://c:1 is unreachable: refused")
        # Failed as soon as c fails, before the other two's group commits answer.
        with pytest.raises(QuorumFailed, match="0 of 3 replicas answered, 3 needed"):
            await node.coordinator.write_version(b"k", Record.delete(node.clock.now() - 1))
        await run_callbacks()
        assert node.hints.pending(URLS[2]) == 1
        two = Record.put(node.clock.now() - 1, b"on two", copies=2)
        assert node.coordinator.owners_quorum(two) == Quorum(ack=2, copies=2)


# --- a request's quorum ----------------------------------------------------------------------------------


async def test_a_quorum_is_parsed_once_an_epoch_and_afresh_under_the_next(tmp_path: Path) -> None:
    with coordinator_node(tmp_path) as node:
        coordinator = node.coordinator
        first = coordinator.quorum("2", "3")
        assert first == Quorum(2, 3) and coordinator.quorum("2", "3") is first  # parsed once
        for _ in range(2):  # a refusal is not kept: every ask of it is refused
            with pytest.raises(BadQuorum, match="from=4 exceeds the replication factor N=3"):
                coordinator.quorum("1", "4")
        two = Membership.seeded(URLS, ReplicationFactor.parse("2"))
        coordinator.use(Epoch(URLS[0], two, {URLS[1]: node.b, URLS[2]: node.c}, 1))
        assert coordinator.quorum(None, None, read=True) == Quorum(2, 2)  # N = 2 now
        with pytest.raises(BadQuorum, match="from=3 exceeds the replication factor N=2"):
            coordinator.quorum("2", "3")
        for zeros in range(200):  # what clients ask is theirs: only a bounded few are kept
            assert coordinator.quorum("0" * zeros + "1", None) == Quorum(1, 2)
        assert len(coordinator._quorums) <= 64


# --- datacenters: a's alone in the east, b and c in the west, one owner of every key there --------------

SPREAD = Membership.seeded(
    URLS, ReplicationFactor.parse("east:1,west:1"), datacenters=["east", "west", "west"]
)


@pytest.mark.parametrize("fanout", MODES)
async def test_a_local_quorum_write_and_read_need_only_this_nodes_datacenter(
    tmp_path: Path, fanout: FanoutMode
) -> None:
    with coordinator_node(tmp_path, fanout, SPREAD) as node:
        down = ReplicaUnavailable("the west is unreachable")
        node.b.fail_with = node.c.fail_with = down
        coordinator = node.coordinator
        await coordinator.put(b"k", b"v", coordinator.quorum("local_quorum", None))
        found = await coordinator.get(b"k", coordinator.quorum("local_quorum", None, read=True))
        assert found is not None and found.value == b"v"
        assert node.b.reads == node.c.reads == []  # a local read asks no other datacenter
        assert len(node.b.writes + node.c.writes) == 1  # a write goes to every owner: the west's one
        for level in ("quorum", "each_quorum"):
            with pytest.raises(QuorumFailed, match="of 2 replicas answered, 2 needed"):
                await coordinator.put(b"k", b"v", coordinator.quorum(level, None))


async def test_each_quorum_needs_a_majority_in_every_datacenter(tmp_path: Path) -> None:
    with coordinator_node(tmp_path, "async", SPREAD) as node:
        each = node.coordinator.quorum("each_quorum", None)
        assert each.groups == (Group("east", 1, 1), Group("west", 1, 1))
        await node.coordinator.put(b"k", b"v", each)
        (west,) = [peer for peer in (node.b, node.c) if peer.writes]  # the west's owner of k
        west.fail_with = ReplicaTimeout("the west's owner timed out")
        with pytest.raises(QuorumFailed, match=r"\(west: 0 of 1 answered, 1 needed\)"):
            await node.coordinator.get(b"k", each)


# --- nearest_first ---------------------------------------------------------------------------------------


class _Replica:
    """A replica as nearest_first sees it: a URL, a recent p99, whether it is connected and whether it is
    lagging."""

    def __init__(self, url: str, delay: float, connected: bool = True, lagging: bool = False) -> None:
        self.url = url
        self.delay = delay
        self.connected = connected
        self.lagging = lagging

    def speculative_delay(self) -> float:
        return self.delay

    def __repr__(self) -> str:
        return self.url


def test_nearest_first_keeps_placement_order_among_replicas_about_as_fast() -> None:
    local, b, c = _Replica("local", 0.0), _Replica("b", 0.0009), _Replica("c", 0.0002)
    # c is faster, but within the threshold (twice the fastest plus 1 ms): no reordering, load stays spread
    assert nearest_first([b, local, c], local) == [local, b, c]


def test_nearest_first_asks_a_clearly_slow_replica_last() -> None:
    local, slow, fast = _Replica("local", 0.0), _Replica("slow", 0.021), _Replica("fast", 0.002)
    assert nearest_first([slow, fast, local], local) == [local, fast, slow]
    # Without the local replica among the key's replicas, only the remote order changes.
    other = _Replica("other", 0.003)
    assert nearest_first([slow, other, fast], local) == [other, fast, slow]


def test_nearest_first_asks_a_replica_not_connected_last_whatever_its_last_p99() -> None:
    # A peer that died answered fast before it did: its last p99 would keep it first.
    local, dead, slow = _Replica("local", 0.0), _Replica("dead", 0.0001, False), _Replica("slow", 0.021)
    fast = _Replica("fast", 0.002)
    assert nearest_first([dead, slow, fast, local], local) == [local, fast, slow, dead]


def test_nearest_first_asks_a_lagging_replica_after_the_healthy_ones_and_before_the_unconnected() -> None:
    # A stalled peer answered fast before it stalled: its last p99 would keep it first.
    local, stalled = _Replica("local", 0.0), _Replica("stalled", 0.0001, lagging=True)
    slow, fast, dead = _Replica("slow", 0.021), _Replica("fast", 0.002), _Replica("dead", 0.0001, False)
    assert nearest_first([stalled, dead, slow, fast, local], local) == [local, fast, slow, stalled, dead]
    # Every remote one lagging: still asked, in placement order, before the unconnected.
    other = _Replica("other", 0.003, lagging=True)
    assert nearest_first([dead, other, stalled, local], local) == [local, other, stalled, dead]
