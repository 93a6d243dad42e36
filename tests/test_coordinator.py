"""kvnode.coordinator: the order a speculative read asks a key's replicas in (nearest_first)."""

from __future__ import annotations

from kvnode.coordinator import nearest_first


class _Replica:
    """A replica as nearest_first sees it: a URL and a recent p99."""

    def __init__(self, url: str, delay: float) -> None:
        self.url = url
        self.delay = delay

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
