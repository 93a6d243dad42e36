"""kvnode.coordinator.forwards, step by step: which owner of each other datacenter forwards a write (the
first in placement order that can; none for the home datacenter, a lone owner, or a datacenter where none
can), the forwarder's budget, and the FORWARD call's request and reply codecs, malformed ones refused."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from kvnode.coordinator.forwards import (
    NOT_RELAYED,
    STORED,
    Outcome,
    budget_s,
    crossings,
    decode_outcomes,
    decode_request,
    encode_outcomes,
    encode_request,
)
from kvnode.replica.channel.wire import MAX_FORWARD_HEADER, MAX_FORWARD_TARGETS, WireError
from kvnode.replica.errors import ReplicaError, ReplicaRejected
from kvnode.storage.records import CorruptRecord, Record, encode


class Owner(NamedTuple):
    url: str
    forwards: bool = True


def datacenter_of(url: str) -> str:
    """http://east-1 is in east, http://west-2 in west."""
    return url.removeprefix("http://").split("-")[0]


def crossing_urls(owners: list[Owner], home: str = "east") -> list[list[str]]:
    found = crossings(owners, datacenter_of, home, lambda owner: owner.forwards)
    return [[owner.url for owner in crossing] for crossing in found]


def test_each_other_datacenter_s_first_owner_that_forwards_gets_its_write_and_names_the_others() -> None:
    order = [
        Owner("http://east-1"),
        Owner("http://east-2"),
        Owner("http://west-1"),
        Owner("http://west-2"),
        Owner("http://south-1", forwards=False),
        Owner("http://south-2"),
        Owner("http://south-3"),
    ]
    assert crossing_urls(order) == [
        ["http://west-1", "http://west-2"],
        ["http://south-2", "http://south-1", "http://south-3"],  # the first that forwards, then the rest
    ]
    assert crossing_urls(order, home="west")[0] == ["http://east-1", "http://east-2"]


@pytest.mark.parametrize(
    "owners",
    [
        [Owner("http://east-1"), Owner("http://east-2")],  # one datacenter: the coordinator's own
        [Owner("http://east-1"), Owner("http://west-1")],  # a lone owner: sent directly
        [Owner("http://west-1", forwards=False), Owner("http://west-2", forwards=False)],  # none can
        [Owner(f"http://west-{n}") for n in range(MAX_FORWARD_TARGETS + 1)],  # more than a FORWARD names
        [Owner("http://west-1"), Owner("http://west-" + "2" * 250)],  # a URL longer than 255 bytes
    ],
)
def test_owners_no_forward_can_carry_are_written_directly(owners: list[Owner]) -> None:
    assert crossing_urls(owners) == []


def test_a_forwarder_answers_within_what_the_timeout_leaves_of_its_round_trip() -> None:
    assert budget_s(1.0, 0.0) == 0.9  # a tenth of the timeout for the trip back
    assert budget_s(1.0, 0.05) == 0.8
    assert budget_s(0.2, 0.5) == 0.05  # never less than a quarter of the timeout


def test_a_request_names_its_owners_budget_and_record_and_fits_the_channel_s_bound() -> None:
    owners = [f"http://west-{n}:{8080 + n}" for n in range(3)]
    record = Record.put(7, b"value", ttl_us=5, copies=2)
    request = decode_request(encode_request(0.75, owners, record))
    assert request == (0.75, tuple(owners), record)
    widest = encode_request(1.0, ["h" * 255] * MAX_FORWARD_TARGETS, Record.put(1, b""))
    assert len(widest) - len(encode(Record.put(1, b""))) == MAX_FORWARD_HEADER  # the channel allows it


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\x00\x00", "shorter than its header"),
        (b"\x00\x00\x01\x00\x00", "to 0 owners"),
        (b"\x00\x00\x01\x00" + bytes([MAX_FORWARD_TARGETS + 1]), f"to {MAX_FORWARD_TARGETS + 1} owners"),
        (b"\x00\x00\x01\x00\x02\x03abc", "ends inside its owners"),
        (b"\x00\x00\x01\x00\x01\x09abc", "runs past its end"),
    ],
)
def test_a_malformed_request_is_refused(payload: bytes, reason: str) -> None:
    with pytest.raises(WireError, match=reason):
        decode_request(payload)


def test_a_request_whose_record_does_not_decode_is_refused_as_a_malformed_call() -> None:
    with pytest.raises(CorruptRecord):
        decode_request(encode_request(1.0, ["http://west-1"], Record.put(1, b"v"))[:-3] + b"\xff")
    assert issubclass(CorruptRecord, ValueError)  # what the answerers fail a call for


def named_errors() -> list[type[ReplicaError]]:
    """Every way a replica call fails (kvnode.replica.errors), ReplicaError's subclasses at any depth."""
    found: list[type[ReplicaError]] = []
    unseen = [ReplicaError]
    while unseen:
        below = unseen.pop().__subclasses__()
        found += below
        unseen += below
    return [error for error in found if error.__module__ == ReplicaError.__module__]


def test_each_owner_s_outcome_travels_with_its_kind_and_reason() -> None:
    """Every named error, so that a new one is given a kind of its own before it can travel."""
    named = named_errors()
    assert len(named) == 8
    outcomes = [STORED, Outcome(newer=2**64 - 1), NOT_RELAYED] + [
        Outcome(error(f"http://west-{n}: {error.__name__}")) for n, error in enumerate(named)
    ]
    indexed = list(enumerate(outcomes))
    decoded = decode_outcomes(encode_outcomes(indexed[::-1]), len(outcomes))[::-1]  # in any order
    assert [index for index, _ in decoded] == list(range(len(outcomes)))
    assert decoded[:3] == indexed[:3]
    for sent, (_, received) in zip(outcomes[3:], decoded[3:], strict=True):
        assert type(received.error) is type(sent.error) and str(received.error) == str(sent.error)
        assert received.relayed and received.newer is None


def test_an_error_the_wire_does_not_name_travels_as_a_rejection_and_a_long_reason_is_cut() -> None:
    ((_, plain),) = decode_outcomes(encode_outcomes([(0, Outcome(ReplicaError("x" * 5000)))]), 1)
    assert type(plain.error) is ReplicaRejected and str(plain.error) == "x" * 1000


@pytest.mark.parametrize(
    ("payload", "expected", "reason"),
    [
        (encode_outcomes([(2, STORED)]), 2, "malformed outcome \\(owner 2 of 2, kind 0\\)"),
        (b"\x00\x00", 1, "inside an outcome's header"),
        (b"\x00\x01\x00\x02ab", 1, "not a timestamp"),
        (b"\x00\x00\x00\x05ab", 1, "malformed outcome"),  # shorter than it says
        (b"\x00\x63\x00\x00", 1, "malformed outcome \\(owner 0 of 1, kind 99\\)"),
    ],
)
def test_a_malformed_reply_is_refused(payload: bytes, expected: int, reason: str) -> None:
    with pytest.raises(WireError, match=reason):
        decode_outcomes(payload, expected)
