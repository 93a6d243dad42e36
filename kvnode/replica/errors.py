"""The ways a replica call fails. The coordinator catches these, never a bare Exception: each one is a
failed replica for the quorum, and the kind decides what happens to a write it missed."""

from __future__ import annotations

__all__ = [
    "ReplicaDiskFull",
    "ReplicaError",
    "ReplicaNotReady",
    "ReplicaOverloaded",
    "ReplicaProtocolError",
    "ReplicaRejected",
    "ReplicaSkewRefused",
    "ReplicaTimeout",
    "ReplicaUnavailable",
    "keeps_hint",
    "outcome",
]


class ReplicaError(Exception):
    """A replica call failed; the coordinator counts the replica as failed."""


class ReplicaUnavailable(ReplicaError):
    """The replica cannot be reached: connection refused or lost, or the peer is suspect (silent)."""


class ReplicaTimeout(ReplicaError):
    """The replica did not answer within the timeout."""


class ReplicaOverloaded(ReplicaError):
    """Too many calls or bytes are already in flight to this peer; the call was not sent."""


class ReplicaProtocolError(ReplicaError):
    """The replica answered something that is not the replica protocol."""


class ReplicaRejected(ReplicaError):
    """The replica answered, with an error of its own (a corrupt record, a storage failure)."""


class ReplicaDiskFull(ReplicaRejected):
    """The replica's disk is full: it stored nothing (a client's write that fails for it is a 507)."""


class ReplicaSkewRefused(ReplicaRejected):
    """The replica refused a record stamped further ahead of its wall clock than the maximum skew."""


class ReplicaNotReady(ReplicaRejected):
    """The replica's data is not whole (it rebuilds after losing its disk, or does not know yet whether it
    must): what it holds cannot answer a read, not even "absent"."""


# A write that failed this way is kept as a hint for the replica: it was not reached, or it refused for a
# state of its own (a full disk, a storage failure) that passes. A refusal for skew is not (the record
# itself would be refused again), and neither is a protocol error (the peer is not speaking our protocol).
_HINTED: tuple[type[ReplicaError], ...] = (
    ReplicaUnavailable,
    ReplicaTimeout,
    ReplicaOverloaded,
    ReplicaRejected,
)


def keeps_hint(error: BaseException) -> bool:
    """Whether a write that failed with ``error`` is kept as a hint for its replica.

    >>> [keeps_hint(error("x")) for error in (ReplicaDiskFull, ReplicaSkewRefused, ReplicaProtocolError)]
    [True, False, False]
    """
    return isinstance(error, _HINTED) and not isinstance(error, ReplicaSkewRefused)


_OUTCOMES: dict[type[BaseException], str] = {
    ReplicaTimeout: "timeout",
    ReplicaUnavailable: "unavailable",
    ReplicaOverloaded: "overloaded",
    ReplicaProtocolError: "protocol_error",
    ReplicaRejected: "rejected",
    ReplicaSkewRefused: "skew_refused",
    ReplicaNotReady: "not_ready",
    ReplicaDiskFull: "disk_full",
}


def outcome(error: BaseException | None) -> str:
    """A call's outcome as a metric label: ok, timeout, unavailable, overloaded, protocol_error, ...

    >>> outcome(None), outcome(ReplicaTimeout("slow"))
    ('ok', 'timeout')
    """
    return "ok" if error is None else _OUTCOMES.get(type(error), "error")
