"""kvnode.replica.errors: which failed writes are kept as hints, and each failure's metric label."""

from __future__ import annotations

import pytest

from kvnode.replica.errors import (
    ReplicaDiskFull,
    ReplicaError,
    ReplicaNotReady,
    ReplicaOverloaded,
    ReplicaProtocolError,
    ReplicaRejected,
    ReplicaSkewRefused,
    ReplicaTimeout,
    ReplicaUnavailable,
    keeps_hint,
    outcome,
)

# Each failure, whether a write that failed with it is kept as a hint, and its label.
FAILURES = [
    (ReplicaUnavailable, True, "unavailable"),  # not reached: delivered when it is back
    (ReplicaTimeout, True, "timeout"),
    (ReplicaOverloaded, True, "overloaded"),  # never sent
    (ReplicaRejected, True, "rejected"),  # a state of the replica's own, which passes
    (ReplicaDiskFull, True, "disk_full"),
    (ReplicaNotReady, True, "not_ready"),
    (ReplicaSkewRefused, False, "skew_refused"),  # the record itself would be refused again
    (ReplicaProtocolError, False, "protocol_error"),  # the peer does not speak the protocol
]


@pytest.mark.parametrize(("error", "hinted", "label"), FAILURES)
def test_each_failure_says_whether_it_keeps_a_hint_and_its_label(
    error: type[ReplicaError], hinted: bool, label: str
) -> None:
    assert keeps_hint(error("x")) is hinted
    assert outcome(error("x")) == label


def test_every_named_failure_is_a_replica_error_with_a_label_of_its_own() -> None:
    assert all(issubclass(error, ReplicaError) for error, _, _ in FAILURES)
    assert len({label for _, _, label in FAILURES}) == len(FAILURES)


def test_a_success_is_ok_and_an_unnamed_failure_is_error_and_keeps_no_hint() -> None:
    assert outcome(None) == "ok"
    assert outcome(ReplicaError("x")) == outcome(RuntimeError("x")) == "error"
    assert not keeps_hint(RuntimeError("x")) and not keeps_hint(ReplicaError("x"))


def test_the_refusals_of_a_full_disk_and_of_a_replica_not_ready_are_rejections() -> None:
    # The coordinator catches ReplicaRejected for a replica that answered with an error of its own.
    assert issubclass(ReplicaDiskFull, ReplicaRejected) and issubclass(ReplicaNotReady, ReplicaRejected)
    assert issubclass(ReplicaSkewRefused, ReplicaRejected)
