"""kvnode.coordinator.quorum: parsing ack and from, by number or by name, tallying replica answers (per
datacenter where a level counts them so)."""

from __future__ import annotations

import itertools

import pytest

from kvnode.coordinator.quorum import NO_GROUP, BadQuorum, Group, Quorum, QuorumTally

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


# Consistency levels by name, and the tally per datacenter

TWO_DCS = (("east", 3), ("west", 3))  # a key's owners in each datacenter, the coordinator's first


@pytest.mark.parametrize(
    ("level", "read", "quorum"),
    [
        ("one", False, Quorum(1, 6)),
        ("ONE", True, Quorum(1, 6)),
        ("quorum", False, Quorum(4, 6)),
        ("all", True, Quorum(6, 6)),
        ("local_quorum", True, Quorum(2, 3)),  # a read asks the local owners only: the first 3
        ("local_quorum", False, Quorum(2, 6, (Group("east", 2, 3),))),  # a write goes to every owner
        ("each_quorum", True, Quorum(4, 6, (Group("east", 2, 3), Group("west", 2, 3)))),
        ("each_quorum", False, Quorum(4, 6, (Group("east", 2, 3), Group("west", 2, 3)))),
    ],
)
def test_a_named_ack_counts_the_keys_owners_by_datacenter(level: str, read: bool, quorum: Quorum) -> None:
    assert Quorum.parse(level, None, TWO_DCS, read=read) == quorum


def test_in_one_datacenter_every_quorum_by_name_is_the_plain_majority() -> None:
    for level in ("quorum", "local_quorum", "each_quorum"):
        for read in (False, True):
            assert Quorum.parse(level, None, 5, read=read) == Quorum(3, 5)


def test_a_named_ack_goes_without_from_and_an_unknown_name_is_refused_naming_the_levels() -> None:
    with pytest.raises(BadQuorum, match="from goes without a named ack: ack=quorum counts the key's owners"):
        Quorum.parse("quorum", "3", TWO_DCS)
    with pytest.raises(BadQuorum, match="ack must be a positive integer or one of one, quorum, local_quorum"):
        Quorum.parse("most", None, TWO_DCS)
    with pytest.raises(BadQuorum, match="datacenter west, which holds no copies"):
        Quorum.parse("local_quorum", None, (("west", 0), ("east", 3)))


def test_each_quorum_is_reached_only_once_every_datacenter_has_its_majority() -> None:
    quorum = Quorum.parse("each_quorum", None, TWO_DCS)
    east, west = quorum.group_of("east"), quorum.group_of("west")
    tally = QuorumTally(quorum)
    for _ in range(3):
        tally.succeed(east)
        assert verdict(tally) == (False, False)  # four successes in all are not enough: none in west
    tally.fail(west)
    tally.succeed(west)
    assert verdict(tally) == (False, False)
    assert tally.shortfall() == " (west: 1 of 3 answered, 2 needed)"
    tally.succeed(west)
    assert verdict(tally) == (True, False) and tally.shortfall() == ""


def test_each_quorum_is_out_of_reach_once_one_datacenter_lost_its_majority() -> None:
    quorum = Quorum.parse("each_quorum", None, TWO_DCS)
    tally = QuorumTally(quorum)
    tally.fail(quorum.group_of("west"))
    assert verdict(tally) == (False, False)
    tally.fail(quorum.group_of("west"))
    assert verdict(tally) == (False, True)  # four others could still answer: the total is not the rule


def test_a_local_quorum_write_counts_the_local_owners_and_no_remote_failure_stops_it() -> None:
    quorum = Quorum.parse("local_quorum", None, TWO_DCS)
    local, remote = quorum.group_of("east"), quorum.group_of("west")
    assert remote == NO_GROUP
    tally = QuorumTally(quorum)
    for _ in range(3):
        tally.fail(remote)  # the other datacenter is down
    tally.succeed(remote)  # and a remote success makes no local majority
    tally.succeed(local)
    assert verdict(tally) == (False, False)
    tally.succeed(local)
    assert verdict(tally) == (True, False)
    failing = QuorumTally(quorum)
    failing.fail(local)
    failing.fail(local)
    assert verdict(failing) == (False, True)


@pytest.mark.parametrize(
    ("quorum", "groups"),
    [
        (Quorum(ack=2, copies=3), (NO_GROUP,) * 3),
        (Quorum.parse("each_quorum", None, TWO_DCS), (0, 0, 0, 1, 1, 1)),
        (Quorum.parse("local_quorum", None, TWO_DCS), (0, 0, 0, NO_GROUP, NO_GROUP, NO_GROUP)),
    ],
)
def test_each_count_says_whether_it_settled_the_outcome(quorum: Quorum, groups: tuple[int, ...]) -> None:
    """What ``succeed`` and ``fail`` answer is what ``reached`` and ``impossible`` say after them, for every
    order of outcomes: a fan-out asks nothing more per answer."""
    for outcomes in itertools.product((True, False), repeat=len(groups)):
        for order in (groups, groups[::-1]):
            tally = QuorumTally(quorum)
            for succeeded, group in zip(outcomes, order, strict=True):
                if succeeded:
                    assert tally.succeed(group) == tally.reached
                else:
                    assert tally.fail(group) == tally.impossible


def test_owners_a_change_adds_must_confirm_too_in_their_datacenters_group() -> None:
    each = Quorum.parse("each_quorum", None, TWO_DCS)
    assert each.with_pending(["west"]) == Quorum(5, 7, (Group("east", 2, 3), Group("west", 3, 4)))
    local = Quorum.parse("local_quorum", None, TWO_DCS)
    assert local.with_pending(["west"]) == Quorum(2, 7, (Group("east", 2, 3),))  # not a local owner
    assert local.with_pending(["east"]) == Quorum(3, 7, (Group("east", 3, 4),))
    assert Quorum(2, 3).with_pending(["east", "west"]) == Quorum(4, 5)
