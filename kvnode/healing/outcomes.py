"""What anti-entropy's repairs did (kvnode.healing.anti_entropy): one exchange's outcome, a full repair's
progress (``admin repair``), and the totals since start with their figures (pure)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from kvnode.figures import Figure, Figures, Kind

__all__ = ["REPAIR_FIGURES", "PeerOutcome", "RepairRun", "RepairTotals"]


@dataclass
class PeerOutcome:
    """One exchange's result and figures."""

    peer: str
    completed: bool = False
    reason: str = ""  # why it did not complete
    segments_compared: int = 0
    segments_differing: int = 0
    sent: int = 0
    received: int = 0
    refused: int = 0  # records refused for clock skew (by either end)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class RepairRun:
    """A full repair with every peer (``admin repair``), as it progresses."""

    peers: tuple[str, ...]
    started: float = field(default_factory=time.monotonic)
    outcomes: dict[str, PeerOutcome] = field(default_factory=dict)
    current: str = ""
    ended: float | None = None

    @property
    def done(self) -> bool:
        return self.ended is not None

    @property
    def unreached(self) -> list[str]:
        return [peer for peer, outcome in self.outcomes.items() if not outcome.completed]

    def summary(self) -> str:
        """One line: segments compared, records sent and received, seconds, peers that failed."""
        outcomes = self.outcomes.values()
        seconds = (self.ended or time.monotonic()) - self.started
        line = (
            f"repaired with {len(self.peers) - len(self.unreached)} of {len(self.peers)} peers: "
            f"{sum(o.segments_compared for o in outcomes)} segments compared "
            f"({sum(o.segments_differing for o in outcomes)} differing), "
            f"{sum(o.sent for o in outcomes)} records sent, {sum(o.received for o in outcomes)} received"
            f", in {seconds:.1f} s"
        )
        failed = [f"{peer} ({self.outcomes[peer].reason})" for peer in self.unreached]
        return line + (f"; not repaired: {', '.join(failed)}" if failed else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "peers": list(self.peers),
            "done": self.done,
            "current": self.current,
            "seconds": round((self.ended or time.monotonic()) - self.started, 3),
            "outcomes": {peer: outcome.to_json() for peer, outcome in self.outcomes.items()},
            "unreached": self.unreached,
            "summary": self.summary(),
        }


@dataclass
class RepairTotals:
    """Since the node started, for /metrics."""

    exchanges: dict[str, int] = field(default_factory=lambda: {"completed": 0, "failed": 0})
    segments_compared: int = 0
    segments_differing: int = 0
    sent: int = 0
    received: int = 0
    refused: int = 0


_RECORDS = "Records anti-entropy moved, by direction (sent, received), or refused for clock skew"

# RepairTotals' figures (kvnode.figures), in /v0/stats's "repair" after the summaries'.
REPAIR_FIGURES = Figures("repair", (
    Figure("exchanges", Kind.COUNTER, "Anti-entropy exchanges with a peer, by outcome",
           "kvnode_repair_exchanges", by="outcome"),
    Figure("segments_compared", Kind.COUNTER, "Summary segments compared with peers",
           "kvnode_repair_segments_compared"),
    Figure("segments_differing", Kind.COUNTER, "Summary segments found to differ from a peer's",
           "kvnode_repair_segments_differing"),
    Figure("sent", Kind.COUNTER, _RECORDS, "kvnode_repair_records", key="records.sent",
           label=("direction", "sent")),
    Figure("received", Kind.COUNTER, _RECORDS, "kvnode_repair_records", key="records.received",
           label=("direction", "received")),
    Figure("refused", Kind.COUNTER, _RECORDS, "kvnode_repair_records", key="records.refused",
           label=("direction", "refused")),
))  # fmt: skip
