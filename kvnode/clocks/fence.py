"""Whether this node's clock is the one that is off: the fence's verdict (pure) and the node's fence.

:func:`judge` decides from the peers' offset estimates (kvnode.clocks.offsets; this node is at 0). A peer
is *far* when its offset, less its uncertainty, exceeds the maximum skew. This node is fenced when it is
far from at least half of the members it has measured: with one bad clock among three, the bad node is far
from both others and fences itself, while each good node is far from one of two and names that one. Two
measured members far apart cannot tell which clock is wrong, so both are fenced (unavailable, never
wrong), as CockroachDB's clock monitor does. No estimate (no peer measured) is no fence.

No fence is not yet a *checked* clock: a node whose clock is within the maximum skew of a majority of the
members (itself among them) has been checked against the cluster (:meth:`Verdict.checks`). Until it has
been, once since it started, it must not stamp a version that could later beat a write acknowledged after
it: a node started alone a minute ahead would. A majority, not one peer: two nodes of five that agree with
each other (one bad time source for both) are still only two; any two majorities share a member.

>>> from kvnode.clocks.offsets import Offset
>>> judge({"b": Offset(-60_000_000, 500), "c": Offset(-60_000_100, 400)}, max_skew_us=5_000_000).fenced
True
>>> verdict = judge({"a": Offset(60_000_000, 500), "c": Offset(-100, 400)}, max_skew_us=5_000_000)
>>> verdict.fenced, verdict.far, verdict.offset_us
(False, ('a',), 0)
>>> judge({}, max_skew_us=5_000_000).fenced, judge({}, max_skew_us=5_000_000).checks(members=3)
(False, False)
>>> verdict.checks(members=3), verdict.checks(members=5)   # itself and c of 3 members; of 5, too few
(True, False)

:class:`ClockFence` holds the current verdict: ``ready`` (checked since start, not fenced, and measured or
alone) is a plain attribute, so a write checks it with one read and awaits :meth:`ClockFence.admit_write`
only when not.
It also judges records against the cluster's time as this node best knows it, for every path that stores
one: its wall clock less its own estimated offset at the last measurement, carried forward by the
monotonic clock, so a wall clock stepped since then is caught by the very next record.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import NoReturn, Protocol

from kvnode.clocks.offsets import ClockOffsets, Offset
from kvnode.figures import Figure, Figures, Kind
from kvnode.topology.epoch import Epoch

__all__ = ["FENCE_FIGURES", "ClockFence", "ClockFenced", "ClockedPeer", "Verdict", "beyond_skew", "judge"]


class ClockedPeer(Protocol):
    """A peer whose clock can be measured (kvnode.replica.peer: one clock call on its channel)."""

    def measure_clock(self) -> Awaitable[None]: ...


async def _measure(peers: tuple[ClockedPeer, ...]) -> None:
    await asyncio.gather(*(peer.measure_clock() for peer in peers))


log = logging.getLogger(__name__)

_REFUSAL_LOG_EVERY_S = 10.0


class ClockFenced(Exception):
    """This node refuses to coordinate a write: its clock is off (the message says by how much), or not
    yet checked against the cluster's (the message says against how many members)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    fenced: bool
    offset_us: int  # this node's wall clock minus the measured members' median (0 when unmeasured)
    measured: int  # peers with a current estimate
    far: tuple[str, ...]  # peers beyond the maximum skew from this node
    peers: Mapping[str, Offset]  # every current estimate, by peer

    @property
    def agreeing(self) -> int:
        """The members whose clocks are within the maximum skew of this node's, itself included."""
        return self.measured - len(self.far) + 1

    def checks(self, members: int) -> bool:
        """Whether this node's clock is within the maximum skew of a majority of ``members`` (itself
        counted): checked against the cluster. Implies not fenced."""
        return 2 * self.agreeing > members

    @property
    def peer_offsets_us(self) -> dict[str, int]:
        """Each measured peer's clock minus this node's."""
        return {peer: offset.offset_us for peer, offset in self.peers.items()}

    def describe(self) -> str:
        """One line: what is wrong with which clock, and what to check."""
        if not self.far:
            return f"clock within the maximum skew of {self.measured} measured peer(s)"
        far = ", ".join(self.far)
        if not self.fenced:
            return f"the clock of {far} is beyond the maximum skew from this node's and the others'"
        if self.measured >= 2:
            direction = "ahead of" if self.offset_us > 0 else "behind"
            return (
                f"this node's clock is {abs(self.offset_us) / 1e6:.1f} s {direction} the cluster's (the "
                f"median of {self.measured + 1} members' clocks); check this node's time source (NTP)"
            )
        return (
            f"this node's clock and {far}'s are beyond the maximum skew apart and no third member says "
            "which is wrong; check both nodes' time sources (NTP)"
        )


# A Verdict's figures (kvnode.figures), in /v0/stats's "clock" beside the hybrid clock's.
FENCE_FIGURES = Figures("fence", (
    Figure("fenced", Kind.GAUGE, "1 while this node's clock is fenced (off the cluster's): it refuses to "
           "coordinate writes", "kvnode_clock_fenced"),
    Figure("offset_us", Kind.GAUGE, "This node's wall clock minus the median of the members it has measured "
           "(the clock fence's view)", "kvnode_clock_offset_seconds", key="offset_ms", micros=True),
    Figure("measured", Kind.GAUGE, "Peers with a current clock offset estimate",
           "kvnode_clock_measured_peers", key="measured_peers"),
    Figure("peer_offsets_us", Kind.GAUGE, "Each measured peer's clock minus this node's",
           "kvnode_clock_peer_offset_seconds", key="peer_offsets_ms", by="peer", micros=True),
    Figure("far", Kind.TEXT, "peers beyond the maximum skew from this node"),
    Figure("describe", Kind.TEXT, "which clock is off, and what to check", key="summary"),
), section="clock")  # fmt: skip


def judge(estimates: Mapping[str, Offset], max_skew_us: int) -> Verdict:
    """The fence's verdict from each measured peer's offset (see the module's docstring)."""
    far = tuple(peer for peer, o in estimates.items() if abs(o.offset_us) - o.uncertainty_us > max_skew_us)
    clocks = sorted([0, *(o.offset_us for o in estimates.values())])
    median = clocks[(len(clocks) - 1) // 2]
    fenced = bool(estimates) and 2 * len(far) >= len(estimates) + 1
    return Verdict(fenced, -median, len(estimates), far, dict(estimates))


def beyond_skew(timestamp: int) -> str:
    """Why a record was refused, in the words every storing path uses."""
    return f"record stamped {timestamp} is beyond the maximum clock skew ahead of the cluster"


class ClockFence:
    def __init__(
        self,
        wall_us: Callable[[], int],
        max_skew_us: int,
        offsets: ClockOffsets,
        *,
        peers: int,
        now_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self.wall_us = wall_us
        self.max_skew_us = max_skew_us
        self._offsets = offsets
        self._peers = peers
        self._now_s = now_s
        self._anchor = (wall_us(), now_s())  # the cluster's time (us) at a monotonic instant (s)
        self.verdict = judge({}, max_skew_us)
        self.fenced = False
        self.checked = peers == 0  # within the skew of a majority of the members, once since start
        self.ready = self.checked  # a write may go ahead without judging: checked, not fenced, measured
        self._measurable: tuple[ClockedPeer, ...] = ()  # the peers, once the node runs with an epoch
        self._measuring: asyncio.Future[None] | None = None
        self._next_measurement: asyncio.Future[None] | None = None  # resolved by the next measurement
        self._last_refusal_log = 0.0

    def use(self, epoch: Epoch[ClockedPeer]) -> None:
        """Judge among another membership's peers, and measure them, from the next verdict on."""
        self._measurable = tuple(epoch.peers.values())
        self._peers = len(self._measurable)
        self.checked = self.checked or self._peers == 0
        self.refresh()

    def measured(self, peer: str, offset: Offset) -> None:
        """One measurement of ``peer`` (the replica channel's clock call)."""
        now_s = self._now_s()
        self._offsets.record(peer, offset, at_s=now_s)
        self._anchor = (self.wall_us() - self.refresh().offset_us, now_s)
        if self._next_measurement is not None and not self._next_measurement.done():
            self._next_measurement.set_result(None)

    def refresh(self) -> Verdict:
        """Judge again from the current estimates (old ones age out); log a change of verdict."""
        before, verdict = self.verdict, judge(self._offsets.estimates(self._now_s()), self.max_skew_us)
        self.verdict, self.fenced = verdict, verdict.fenced
        if not self.checked and verdict.checks(self._peers + 1):
            self.checked = True
            log.info(
                "clock checked: within the maximum skew of %d of %d members",
                verdict.agreeing,
                self._peers + 1,
            )
        self.ready = self.checked and not verdict.fenced and (verdict.measured > 0 or self._peers == 0)
        # Fenced with a peer unmeasured is provisional (at start, a good node may measure the bad one
        # first): not logged here; a write it refuses is.
        provisional = verdict.fenced and verdict.measured < self._peers
        if (verdict.fenced != before.fenced or verdict.far != before.far) and not provisional:
            if verdict.fenced:
                log.error("clock fence: refusing to coordinate writes: %s", verdict.describe())
            elif verdict.far:
                log.warning("clock fence: %s", verdict.describe())
            elif before.fenced and before.measured >= self._peers:  # an announced fence, lifted
                log.warning("clock fence lifted: this node's clock is back within the maximum skew")
        return verdict

    def cluster_now_us(self) -> int:
        """The cluster's time as this node best knows it (see the module's docstring)."""
        anchor_us, anchor_s = self._anchor
        return anchor_us + int((self._now_s() - anchor_s) * 1e6)

    def acceptable(self, timestamp: int) -> bool:
        """Whether a record stamped ``timestamp`` may be stored: at most the maximum skew ahead of the
        cluster's time as this node best knows it."""
        return timestamp - self.cluster_now_us() <= self.max_skew_us

    async def admit_write(self) -> None:
        """Raise ClockFenced when this node must not coordinate a write: fenced, or not checked since it
        started (no majority of the members measured within the skew, even after measuring the peers it
        can reach now); a write calls it only when not ``ready``.

        Before any peer is measured (start, or every peer silent for a while), and while fenced with a
        peer unmeasured, it first measures the peers it can reach: a node with a bad clock must not store
        a write before it learns that its clock is bad, and a good node that has measured only the bad one
        must not refuse writes while the third member would clear it.
        """
        await self._judge_now()
        if self.fenced:
            self._refuse(f"clock fenced: {self.verdict.describe()}")
        if not self.checked:
            self._refuse(
                f"clock unchecked: this node has not yet checked its clock against a majority of the "
                f"{self._peers + 1} members ({self.verdict.agreeing} within the maximum skew, itself "
                "included); it coordinates writes once it has (start the others, or check it reaches them)"
            )

    def _refuse(self, reason: str) -> NoReturn:
        now = time.monotonic()
        if now - self._last_refusal_log >= _REFUSAL_LOG_EVERY_S:
            self._last_refusal_log = now
            log.error("clock fence: refused to coordinate a write: %s", reason)
        raise ClockFenced(reason)

    async def _judge_now(self) -> None:
        """Measure the peers not measured yet, until the verdict is decided: this node's clock within the
        skew of a majority of the members (this node among them), or every peer answered or failed
        (bounded by the replica timeout). A frozen peer does not hold up a write that the others already
        clear."""
        verdict = self.refresh()
        if verdict.measured >= self._peers or not self._measurable:
            return
        if self._measuring is None:  # one round at a time, shared by the writes waiting on it
            self._measuring = asyncio.ensure_future(_measure(self._measurable))
            self._measuring.add_done_callback(self._measured_all)
        measuring = self._measuring
        while not measuring.done() and not verdict.checks(self._peers + 1):
            if self._next_measurement is None or self._next_measurement.done():
                self._next_measurement = asyncio.get_running_loop().create_future()
            await asyncio.wait([measuring, self._next_measurement], return_when=asyncio.FIRST_COMPLETED)
            verdict = self.refresh()

    def _measured_all(self, task: asyncio.Future[None]) -> None:
        self._measuring = None
