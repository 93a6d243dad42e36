"""argparse ``type=`` functions shared by every command line of the project (kvnode, loadtest,
profiling): each turns one flag's text into a value or raises ArgumentTypeError with a one-line reason."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

__all__ = [
    "choices",
    "http_urls",
    "integer",
    "non_negative_int",
    "port",
    "positive_float",
    "positive_int",
]


def _number(text: str, kind: type[int] | type[float]) -> float:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not {'an integer' if kind is int else 'a number'}: {text!r}"
        ) from None


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


def http_urls(text: str) -> tuple[str, ...]:
    """A comma-separated list of http://HOST:PORT URLs (trailing slashes dropped)."""
    urls = tuple(url.strip().rstrip("/") for url in text.split(",") if url.strip())
    for url in urls:
        if not url.startswith("http://") or url.count(":") != 2:
            raise argparse.ArgumentTypeError(f"URLs look like http://HOST:PORT, got {url!r}")
    if not urls:
        raise argparse.ArgumentTypeError("the URL list is empty")
    return urls


def choices(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    """A comma-separated subset of ``allowed``, in the order given, without repeats."""

    def parse(text: str) -> list[str]:
        chosen = [item.strip() for item in text.split(",") if item.strip()]
        unknown = [item for item in chosen if item not in allowed]
        if unknown or not chosen:
            raise argparse.ArgumentTypeError(f"choose from {','.join(allowed)}, got {text!r}")
        return list(dict.fromkeys(chosen))

    return parse
