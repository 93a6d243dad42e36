"""kvnode.paxos.conditions: what an ETag names, every malformed header, and each condition judged."""

from __future__ import annotations

import pytest

from kvnode.paxos.conditions import (
    IfAbsent,
    IfMatch,
    MalformedCondition,
    etag,
    holds,
    parse_condition,
    quoted_etag,
)
from kvnode.storage.records import Record

VERSION = Record.put(1_000, b"value")


def test_an_etag_is_the_same_for_the_same_version_and_differs_for_any_other() -> None:
    assert etag(VERSION) == etag(Record.put(1_000, b"value"))
    others = [
        Record.put(1_001, b"value"),
        Record.put(1_000, b"valuf"),
        Record.put(1_000, b"value", ttl_us=5),
        Record.delete(1_000),
        Record.put(1_000, b""),
    ]
    assert len({etag(record) for record in [VERSION, *others]}) == len(others) + 1


def test_copies_is_placement_not_content_so_it_is_not_in_the_etag() -> None:
    assert etag(Record.put(1_000, b"value", copies=2)) == etag(VERSION)


def test_the_quoted_form_parses_back_to_the_same_condition() -> None:
    assert quoted_etag(VERSION) == f'"{etag(VERSION)}"'
    assert parse_condition(quoted_etag(VERSION), None) == IfMatch(etag(VERSION))
    assert parse_condition(f"  {quoted_etag(VERSION)} ", None) == IfMatch(etag(VERSION))


def test_no_header_is_no_condition_and_if_none_match_star_is_if_absent() -> None:
    assert parse_condition(None, None) is None
    assert parse_condition(None, "*") == parse_condition(None, " * ") == IfAbsent()


@pytest.mark.parametrize(
    ("if_match", "if_none_match", "reason"),
    [
        ('"x"', "*", "together"),
        (None, '"abc"', "If-None-Match takes only \\*"),
        (None, "", "If-None-Match takes only \\*"),
        ("*", None, "not \\*"),
        ('W/"abc"', None, "weak"),
        ('"a", "b"', None, "exactly one"),
        ("abc", None, "double quotes"),
        ('"', None, "double quotes"),
        ("", None, "double quotes"),
        ('""', None, "not an ETag this store gives"),
        ('"' + "A" * 32 + '"', None, "not an ETag this store gives"),
        ('"' + "a" * 33 + '"', None, "not an ETag this store gives"),
    ],
)
def test_a_malformed_condition_says_why_in_one_line(
    if_match: str | None, if_none_match: str | None, reason: str
) -> None:
    with pytest.raises(MalformedCondition, match=reason) as raised:
        parse_condition(if_match, if_none_match)
    assert "\n" not in str(raised.value)
    assert isinstance(raised.value, ValueError)


def test_if_match_compares_with_the_newest_version_a_tombstone_or_an_expired_one_included() -> None:
    tombstone, expiring = Record.delete(2_000), Record.put(2_000, b"v", ttl_us=10)
    assert holds(IfMatch(etag(tombstone)), tombstone, now_us=5_000)
    assert holds(IfMatch(etag(expiring)), expiring, now_us=5_000)  # expired, yet still the newest version
    assert not holds(IfMatch(etag(VERSION)), tombstone, now_us=5_000)
    assert not holds(IfMatch(etag(VERSION)), None, now_us=5_000)


def test_if_absent_holds_when_there_is_no_live_value() -> None:
    assert holds(IfAbsent(), None, now_us=5_000)
    assert holds(IfAbsent(), Record.delete(2_000), now_us=5_000)
    assert holds(IfAbsent(), Record.put(2_000, b"v", ttl_us=10), now_us=2_010)  # expired at that instant
    assert not holds(IfAbsent(), Record.put(2_000, b"v", ttl_us=10), now_us=2_009)
    assert not holds(IfAbsent(), VERSION, now_us=5_000)


def test_no_condition_always_holds() -> None:
    assert holds(None, None, 0) and holds(None, VERSION, 0)
