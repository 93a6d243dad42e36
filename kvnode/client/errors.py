"""The errors of kvnode.client: one class per way a call fails, and the error an answer stands for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvnode.client.versions import Versioned

__all__ = [
    "Answer",
    "BadRequest",
    "KvnodeError",
    "NotFound",
    "OutcomeUnknown",
    "Overloaded",
    "PreconditionFailed",
    "QuorumNotReached",
    "ServerError",
    "Unreachable",
    "error_of",
]

_DEFAULT_RETRY_AFTER_S = 1.0  # a 503 without a usable Retry-After (the node always sends one)


class KvnodeError(Exception):
    """A request that did not succeed: ``url`` is the node it went to last, ``reason`` why."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason


class NotFound(KvnodeError):
    """A GET's ``404``: the key is absent, or its newest version is a delete."""


class BadRequest(KvnodeError):
    """A ``4xx`` other than a GET's 404 (a bad id or quorum, a body over the limit, no valid token (401)
    or a role that does not allow the request (403), ...): the request itself is wrong, so it is never
    retried. ``reason`` is the node's one line."""

    def __init__(self, url: str, reason: str, status: int) -> None:
        super().__init__(url, f"{status} {reason}")
        self.reason = reason
        self.status = status


class QuorumNotReached(KvnodeError):
    """A ``504``: fewer than ``ack`` replicas answered. A write may still have been applied on some."""


class PreconditionFailed(KvnodeError):
    """A conditional write's ``412``: its condition did not hold, and nothing was written.

    ``etag`` and ``value`` are the key's current version (None and None: it has no live value), as a
    serial read made right after the 412 found it (the 412 names the version's ETag, not its value), so
    they are the newest version at some instant after the refusal: a read-modify-write can go on from
    them. ``current`` is the same pair as a :class:`Versioned` (None: no live value).
    """

    def __init__(self, url: str, reason: str, current: Versioned | None) -> None:
        super().__init__(url, reason)
        self.current = current
        self.etag = None if current is None else current.etag
        self.value = None if current is None else current.value


class OutcomeUnknown(KvnodeError):
    """A conditional write whose outcome is unknown: the node answered ``504`` (its round could not finish:
    too few owners answered in time, or contention outlasted the timeout), or the request was sent and
    no answer came. The write may or may not take effect; the next round on the key settles it. Never
    retried by the client: a retry could apply the write twice, or answer 412 for the write's own success.
    To resolve it, read the key with ``get_versioned(key, serial=True)`` (which completes a round left
    half-done first) and decide from what it holds: the value written, or a version built on it, means it
    applied."""


class Overloaded(KvnodeError):
    """A ``503``: the node shed the request before doing any work; ``retry_after`` is its Retry-After."""

    def __init__(self, url: str, reason: str, retry_after: float) -> None:
        super().__init__(url, reason)
        self.retry_after = retry_after


class ServerError(KvnodeError):
    """Any other answer that is not a success (a ``500`` storage error, ...), with its status."""

    def __init__(self, url: str, reason: str, status: int) -> None:
        super().__init__(url, f"{status} {reason}")
        self.reason = reason
        self.status = status


class Unreachable(KvnodeError):
    """No answer: the connection could not be opened, or failed or timed out before the answer.

    ``maybe_applied`` is True for a write that was sent: like a 504, it may have been applied.
    """

    def __init__(self, url: str, reason: str, maybe_applied: bool = False) -> None:
        super().__init__(url, reason)
        self.maybe_applied = maybe_applied


@dataclass(frozen=True, slots=True)
class Answer:
    """A node's answer to one request, read whole."""

    url: str
    status: int
    body: bytes
    headers: Mapping[str, str]

    @property
    def reason(self) -> str:
        """The node's one line (an error's body), or the status where it said none."""
        return self.body.decode("utf-8", errors="replace").strip() or f"status {self.status}"


def error_of(answer: Answer, method: str) -> KvnodeError:
    """The error an answer that is not a success stands for."""
    reason = answer.reason
    status = answer.status
    if status == 404 and method == "GET":
        return NotFound(answer.url, reason)
    if status == 503:
        return Overloaded(answer.url, reason, _retry_after(answer.headers.get("Retry-After")))
    if status == 504:
        return QuorumNotReached(answer.url, reason)
    if 400 <= status < 500:
        return BadRequest(answer.url, reason, status)
    return ServerError(answer.url, reason, status)


def _retry_after(header: str | None) -> float:
    """Retry-After in seconds (the node sends whole seconds; an HTTP date is not expected)."""
    try:
        seconds = float(header) if header is not None else _DEFAULT_RETRY_AFTER_S
    except ValueError:
        return _DEFAULT_RETRY_AFTER_S
    return max(seconds, 0.0)
