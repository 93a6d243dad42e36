"""kvnode.topology.versions_heard: the versions peers said, the barrier's question (who is behind), what to
do with a peer's version, and one exchange with a peer at a time (pure)."""

from __future__ import annotations

from kvnode.topology.versions_heard import VersionsHeard


def test_a_peer_is_behind_until_it_says_the_version_or_a_newer_one() -> None:
    heard = VersionsHeard()
    assert heard.behind(["b", "c"], 2) == ["b", "c"]
    heard.heard("b", 2)
    heard.heard("c", 1)
    assert heard.behind(["b", "c"], 2) == ["c"]
    heard.heard("c", 5)
    assert heard.behind(["b", "c"], 2) == []
    assert heard.behind(["b", "c"], 3) == ["b"]


def test_the_last_version_said_counts_even_if_older() -> None:
    heard = VersionsHeard()
    heard.heard("b", 4)
    heard.heard("b", 3)  # the peer restarted from an older store: it says so
    assert heard.behind(["b"], 4) == ["b"]


def test_a_newer_peer_is_fetched_from_an_older_one_offered_to() -> None:
    assert VersionsHeard.compare(mine=2, theirs=3) == "fetch"
    assert VersionsHeard.compare(mine=2, theirs=1) == "offer"
    assert VersionsHeard.compare(mine=2, theirs=2) == "none"


def test_one_exchange_with_a_peer_at_a_time() -> None:
    heard = VersionsHeard()
    assert heard.begin("b") and not heard.begin("b") and heard.begin("c")
    heard.ended("b")
    assert heard.begin("b")
