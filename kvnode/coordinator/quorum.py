"""Quorum rules: the ack/from parameters of a request and the accounting of replica answers. No I/O."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BadQuorum", "Quorum", "QuorumTally"]


class BadQuorum(ValueError):
    """ack/from parameters a request may not ask for; the message is the client's one-line reason."""


@dataclass(frozen=True, slots=True)
class Quorum:
    """A request's ``ack`` of ``copies``: ``copies`` is its ``from``, the key's first owners written (a
    record says it as Record.copies) or asked, and ``ack`` how many must answer."""

    ack: int
    copies: int  # the request's `from`

    @classmethod
    def parse(cls, ack: str | None, copies: str | None, replication: int) -> Quorum:
        """Validate the query parameters against the cluster's replication factor N (a key's owners);
        defaults are from = N, ack = from // 2 + 1.

        >>> Quorum.parse(None, None, 3)
        Quorum(ack=2, copies=3)
        """
        n = replication if copies is None else _positive(copies, "from")
        if n > replication:
            raise BadQuorum(f"from={n} exceeds the replication factor N={replication}")
        a = n // 2 + 1 if ack is None else _positive(ack, "ack")
        if a > n:
            raise BadQuorum(f"ack={a} exceeds from={n}")
        return cls(a, n)


_MAX_DIGITS = 9  # no cluster is that large; and int() refuses strings of thousands of digits


def _positive(text: str, name: str) -> int:
    digits = text.lstrip("0")
    if not text.isascii() or not text.isdigit() or not digits:
        raise BadQuorum(f"{name} must be a positive integer, got {text[:40]!r}")
    if len(digits) > _MAX_DIGITS:
        raise BadQuorum(f"{name}={digits[:12]}... is larger than any cluster")
    return int(digits)


@dataclass(slots=True)
class QuorumTally:
    """Counts replica answers for one request and says when its outcome is known.

    >>> tally = QuorumTally(Quorum(ack=2, copies=3))
    >>> tally.fail(); tally.fail(); tally.impossible
    True
    """

    quorum: Quorum
    successes: int = 0
    failures: int = 0

    def succeed(self) -> None:
        self.successes += 1

    def fail(self) -> None:
        self.failures += 1

    @property
    def reached(self) -> bool:
        return self.successes >= self.quorum.ack

    @property
    def impossible(self) -> bool:
        """So many replicas failed that the rest cannot make up ack any more."""
        return self.quorum.copies - self.failures < self.quorum.ack
