"""argparse ``type=`` functions shared by every command line of the project (kvnode, loadtest,
profiling): each turns one flag's text into a value or raises ArgumentTypeError with a one-line reason."""

from __future__ import annotations

import argparse
import ipaddress
import re
from collections.abc import Callable, Sequence
from typing import TypeVar

from kvnode.coordinator.quorum import Consistency

T = TypeVar("T")

__all__ = [
    "ack",
    "choices",
    "comma_list",
    "host",
    "http_url",
    "http_urls",
    "integer",
    "non_negative_int",
    "port",
    "positive_float",
    "positive_int",
    "token_file",
]


def _number(text: str, kind: type[int] | type[float]) -> float:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not {'an integer' if kind is int else 'a number'}: {text!r}"
        ) from None


def ack(text: str) -> int | str:
    """A request's ``ack``: a positive number, or a consistency level by name (kvnode.coordinator.quorum:
    one, quorum, local_quorum, each_quorum, all)."""
    if text[:1].isdigit():
        return positive_int(text)
    names = [level.value for level in Consistency]
    if text.lower() not in names:
        raise argparse.ArgumentTypeError(
            f"ack is a positive integer or one of {', '.join(names)}, got {text!r}"
        )
    return text.lower()


def integer(text: str) -> int:
    return int(_number(text, int))


def positive_int(text: str) -> int:
    number = int(_number(text, int))
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return number


def non_negative_int(text: str) -> int:
    number = int(_number(text, int))
    if number < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text!r}")
    return number


def positive_float(text: str) -> float:
    number = _number(text, float)
    if not number > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return number


def port(text: str) -> int:
    number = int(_number(text, int))
    if not 0 < number < 65536:
        raise argparse.ArgumentTypeError(f"port must be between 1 and 65535, got {text!r}")
    return number


# A host name or IPv4 address, or in brackets an IPv6 address (RFC 3986; checked by _ipv6), then a port.
_HTTP_URL = re.compile(
    r"(?P<scheme>https?)://(?P<host>[A-Za-z0-9._-]+|\[(?P<ipv6>[^]]*)\]):(?P<port>0|[1-9][0-9]{0,4})"
)
_HOST_NAME = re.compile(r"[A-Za-z0-9._-]+")


def _ipv6(text: str) -> str | None:
    """The address in its canonical form (so ``::1`` and ``0:0::1`` name one node), or None."""
    try:
        return str(ipaddress.IPv6Address(text))
    except ValueError:
        return None


def host(text: str) -> str:
    """An address to listen on: a host name, an IPv4 address, or an IPv6 address (brackets optional)."""
    name = text.strip()
    address = _ipv6(name[1:-1] if name.startswith("[") and name.endswith("]") else name)
    if address is not None:
        return address
    if not _HOST_NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(f"not a host name or IP address: {text!r}")
    return name


def http_url(text: str) -> str:
    """One http://HOST:PORT or https://HOST:PORT URL (a trailing slash dropped); an IPv6 host in
    brackets: http://[::1]:8080."""
    url = text.strip().rstrip("/")
    match = _HTTP_URL.fullmatch(url)
    if match is None:
        netloc = url.removeprefix("https://").removeprefix("http://")
        if _ipv6(netloc) or _ipv6(netloc.rpartition(":")[0]):
            raise argparse.ArgumentTypeError(
                f"an IPv6 address goes in brackets, as in http://[::1]:8080, got {text!r}"
            )
        raise argparse.ArgumentTypeError(
            f"URLs look like http://HOST:PORT, https://HOST:PORT or http://[IPV6]:PORT, got {text!r}"
        )
    if not 0 < int(match["port"]) < 65536:
        raise argparse.ArgumentTypeError(f"port must be between 1 and 65535, got {text!r}")
    if match["ipv6"] is None:
        return url
    address = _ipv6(match["ipv6"])
    if address is None:
        raise argparse.ArgumentTypeError(f"not an IPv6 address: [{match['ipv6']}] in {text!r}")
    return f"{match['scheme']}://[{address}]:{match['port']}"


def http_urls(text: str) -> tuple[str, ...]:
    """A comma-separated list of :func:`http_url` URLs."""
    urls = tuple(http_url(url) for url in text.split(",") if url.strip())
    if not urls:
        raise argparse.ArgumentTypeError("the URL list is empty")
    return urls


def token_file(text: str) -> str:
    """The client token in the file named: its first line, stripped (the file is read, never the token
    given on a command line, where other local users could read it)."""
    try:
        with open(text, encoding="utf-8") as file:
            token = file.readline().strip()
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
        raise argparse.ArgumentTypeError(f"cannot read the token file {text}: {reason}") from None
    if not token:
        raise argparse.ArgumentTypeError(f"the token file {text} is empty")
    return token


def choices(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    """A comma-separated subset of ``allowed``, in the order given, without repeats."""

    def parse(text: str) -> list[str]:
        chosen = [item.strip() for item in text.split(",") if item.strip()]
        unknown = [item for item in chosen if item not in allowed]
        if unknown or not chosen:
            raise argparse.ArgumentTypeError(f"choose from {','.join(allowed)}, got {text!r}")
        return list(dict.fromkeys(chosen))

    return parse


def comma_list(item: Callable[[str], T]) -> Callable[[str], list[T]]:
    """A comma-separated list of ``item``s (at least one)."""

    def parse(text: str) -> list[T]:
        values = [item(part) for part in text.split(",") if part.strip()]
        if not values:
            raise argparse.ArgumentTypeError("the list is empty")
        return values

    return parse
