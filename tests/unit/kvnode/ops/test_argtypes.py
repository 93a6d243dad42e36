"""kvnode.ops.argtypes: the command line's URL and host parsing (host names, IPv6 literals in brackets), and
comma-separated lists."""

from __future__ import annotations

import argparse
import re

import pytest

from kvnode.config import node_url
from kvnode.ops.argtypes import ack, comma_list, host, http_url, http_urls, positive_int


@pytest.mark.parametrize(
    "url",
    [
        "http://198.51.100.1:8080",
        "http://node-1.example:8080",
        "http://[::1]:8080",
        "http://[2001:db8::7]:1",
        "http://[fe80::1]:65535",
        "https://node.example:8443",
        "https://[::1]:8443",
    ],
)
def test_http_url_accepts_host_names_and_ip_literals(url: str) -> None:
    assert http_url(url + "/") == url
    assert http_urls(f" {url} ,http://127.0.0.1:1") == (url, "http://127.0.0.1:1")


def test_http_url_writes_an_ipv6_address_one_way_as_node_urls_do() -> None:
    assert http_url("http://[0:0:0:0:0:0:0:1]:8080") == http_url("http://[::1]:8080") == node_url("::1", 8080)
    assert http_url("http://[2001:DB8::7]:1") == "http://[2001:db8::7]:1"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://::1:8080", "an IPv6 address goes in brackets, as in http://[::1]:8080"),
        ("http://2001:db8::7:8080", "an IPv6 address goes in brackets"),
        ("http://[::1]", "URLs look like http://HOST:PORT, https://HOST:PORT or http://[IPV6]:PORT"),
        ("http://[::g]:8080", "not an IPv6 address: [::g]"),
        ("http://[198.51.100.1]:8080", "not an IPv6 address"),
        ("http://host", "URLs look like"),
        ("ftp://host:8080", "URLs look like"),
        ("http://host:8080/path", "URLs look like"),
        ("http://user@host:8080", "URLs look like"),
        ("http://host:08080", "URLs look like"),
        ("http://host:0", "port must be between 1 and 65535"),
        ("http://host:65536", "port must be between 1 and 65535"),
    ],
)
def test_http_url_refuses_with_a_reason(url: str, reason: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(reason)):
        http_url(url)


def test_host_takes_ipv6_with_or_without_brackets() -> None:
    assert host("198.51.100.1") == "198.51.100.1"
    assert host("[::1]") == host("::1") == host("0:0::1") == "::1"
    for bad in ("", "a b", "http://x", "[x]"):
        with pytest.raises(argparse.ArgumentTypeError, match="not a host name or IP address"):
            host(bad)


def test_comma_list_parses_each_item_and_refuses_an_empty_list_or_a_bad_item() -> None:
    parse = comma_list(positive_int)
    assert parse("3, 6,12,") == [3, 6, 12]
    with pytest.raises(argparse.ArgumentTypeError, match="the list is empty"):
        parse(" , ")
    with pytest.raises(argparse.ArgumentTypeError, match="must be a positive integer, got '0'"):
        parse("3,0")


def test_ack_is_a_positive_number_or_a_consistency_level_by_name() -> None:
    assert [ack(text) for text in ("2", "quorum", "LOCAL_QUORUM", "each_quorum")] == [
        2, "quorum", "local_quorum", "each_quorum",
    ]  # fmt: skip
    with pytest.raises(argparse.ArgumentTypeError, match="must be a positive integer, got '0'"):
        ack("0")
    with pytest.raises(argparse.ArgumentTypeError, match="ack is a positive integer or one of one, quorum"):
        ack("most")
