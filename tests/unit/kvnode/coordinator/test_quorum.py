"""kvnode.coordinator.quorum: parsing ack and from, tallying replica answers."""

from __future__ import annotations

import pytest

from kvnode.coordinator.quorum import BadQuorum, Quorum, QuorumTally

# Quorum.parse


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7])
def test_defaults_are_from_the_replication_factor_and_majority_ack(n: int) -> None:
    assert Quorum.parse(None, None, n) == Quorum(ack=n // 2 + 1, copies=n)


@pytest.mark.parametrize(("replicas", "ack"), [("1", 1), ("2", 2), ("3", 2), ("4", 3), ("5", 3)])
def test_default_ack_follows_an_explicit_from(replicas: str, ack: int) -> None:
    assert Quorum.parse(None, replicas, 5) == Quorum(ack=ack, copies=int(replicas))


def test_explicit_ack_with_default_from() -> None:
    assert Quorum.parse("1", None, 3) == Quorum(ack=1, copies=3)
    assert Quorum.parse("3", None, 3) == Quorum(ack=3, copies=3)


def test_explicit_ack_and_from() -> None:
    assert Quorum.parse("2", "2", 5) == Quorum(ack=2, copies=2)
    assert Quorum.parse("1", "5", 5) == Quorum(ack=1, copies=5)


@pytest.mark.parametrize(
    "text",
    [
        "0",
        "-1",
        "",
        "abc",
        "1.5",
        " 1",
        "+1",
        "\N{SUPERSCRIPT TWO}",
        "\N{ARABIC-INDIC DIGIT ONE}",
        "0x2",
        "1e1",
    ],
)
@pytest.mark.parametrize("name", ["ack", "from"])
def test_not_a_positive_integer_is_rejected_with_its_name(text: str, name: str) -> None:
    ack, replicas = (text, "3") if name == "ack" else ("1", text)
    with pytest.raises(BadQuorum) as raised:
        Quorum.parse(ack, replicas, 3)
    reason = str(raised.value)
    assert f"{name} must be a positive integer" in reason
    assert "\n" not in reason


@pytest.mark.parametrize("name", ["ack", "from"])
def test_a_number_too_long_for_int_is_a_bad_quorum_not_a_crash(name: str) -> None:
    """int() refuses strings of more than 4300 digits (ValueError): that too is the client's mistake."""
    huge = "9" * 5000
    ack, replicas = (huge, None) if name == "ack" else (None, huge)
    with pytest.raises(BadQuorum) as raised:
        Quorum.parse(ack, replicas, 3)
    assert "\n" not in str(raised.value)


def test_ack_above_from_is_rejected() -> None:
    with pytest.raises(BadQuorum, match=r"ack=3 exceeds from=2") as raised:
        Quorum.parse("3", "2", 3)
    assert "\n" not in str(raised.value)
    with pytest.raises(BadQuorum, match=r"ack=4 exceeds from=3"):
        Quorum.parse("4", None, 3)


def test_from_above_the_replication_factor_is_rejected_naming_it() -> None:
    with pytest.raises(BadQuorum, match=r"from=4 exceeds the replication factor N=3") as raised:
        Quorum.parse(None, "4", 3)
    assert "\n" not in str(raised.value)
    with pytest.raises(BadQuorum, match="exceeds the replication factor N=1"):
        Quorum.parse("1", "2", 1)


# QuorumTally


def verdict(tally: QuorumTally) -> tuple[bool, bool]:
    """(reached, impossible)"""
    return tally.reached, tally.impossible


def test_tally_reached_on_the_ack_th_success() -> None:
    tally = QuorumTally(Quorum(ack=2, copies=3))
    assert verdict(tally) == (False, False)
    tally.succeed()
    assert verdict(tally) == (False, False)
    tally.fail()
    assert verdict(tally) == (False, False)
    tally.succeed()
    assert verdict(tally) == (True, False)
    assert (tally.successes, tally.failures) == (2, 1)


@pytest.mark.parametrize(
    ("ack", "replicas", "failures_to_impossible"), [(1, 1, 1), (2, 3, 2), (3, 3, 1), (1, 3, 3)]
)
def test_tally_impossible_once_from_minus_failures_is_below_ack(
    ack: int, replicas: int, failures_to_impossible: int
) -> None:
    tally = QuorumTally(Quorum(ack=ack, copies=replicas))
    for _ in range(failures_to_impossible - 1):
        tally.fail()
        assert verdict(tally) == (False, False)
    tally.fail()
    assert verdict(tally) == (False, True)
