"""kvnode.replica.peer on real nodes: what a peer's state says when it is not connected (stopped: down,
and for how long; refused for the secret: refused, with both ends saying which side lacks or differs in
the secret and how to pass it), and that a fresh cluster connects its peers at start, so its first write
keeps no hint; and that a call's callback may call the peer again at once."""

from __future__ import annotations

from kvnode.replica.errors import ReplicaError, ReplicaUnavailable
from kvnode.replica.peer import PeerReplica
from kvnode.storage.records import Record
from tests.harness import eventually


async def test_a_call_told_its_failure_may_call_the_peer_again_at_once() -> None:
    """A call's callback runs as the call fails (no Future, no later turn of the loop): one that calls the
    same peer again there, as a speculative read or a hint may, gets an outcome of its own."""
    peer = PeerReplica("http://127.0.0.1:1", timeout=1.0)  # nothing listens on port 1
    told: list[tuple[str, ReplicaError | None]] = []

    def again(error: ReplicaError | None, answer: Record | None) -> None:
        told.append(("again", error))

    def first(error: ReplicaError | None, answer: Record | None) -> None:
        told.append(("first", error))
        peer.read_then(b"k", again)

    try:
        peer.read_then(b"k", first)
        await eventually(lambda: len(told) == 2, 10, "both calls' outcomes")
    finally:
        await peer.close()
    assert [name for name, _ in told] == ["first", "again"]
    assert all(isinstance(error, ReplicaUnavailable) for _, error in told)
