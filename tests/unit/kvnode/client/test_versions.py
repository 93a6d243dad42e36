"""kvnode.client.versions: ETags read from an answer as the node quotes them, and the condition headers a
conditional write sends, which the node parses back to the same ETag."""

from __future__ import annotations

from kvnode.client.versions import condition_headers, etag_of
from kvnode.paxos.conditions import IfAbsent, IfMatch, parse_condition

ETAG = "000000000000005f954d9c2fc92f70ef"


def test_an_etag_is_read_without_its_quotes_and_sent_back_with_them() -> None:
    assert etag_of({"ETag": f' "{ETAG}" '}) == ETAG
    assert etag_of({"Content-Type": "text/plain"}) is None
    headers = condition_headers(ETAG)
    assert parse_condition(headers.get("If-Match"), headers.get("If-None-Match")) == IfMatch(ETAG)


def test_no_etag_is_the_condition_that_the_key_has_no_live_value() -> None:
    headers = condition_headers(None)
    assert parse_condition(headers.get("If-Match"), headers.get("If-None-Match")) == IfAbsent()
