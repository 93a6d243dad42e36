"""Quorum rules: the ack/from parameters of a request, by number or by name, and the accounting of replica
answers, per datacenter where the rule counts them so. No I/O.

A request asks ``ack`` of its ``from`` first owners by number, or names a consistency level (Cassandra's):
``one``, ``quorum`` (a majority of all the key's owners), ``local_quorum`` (a majority of its owners in the
coordinator's datacenter), ``each_quorum`` (a majority in every datacenter), ``all``. A named level counts
the key's owners itself, so ``from`` goes without it. Where a level counts a datacenter apart, the quorum
carries a :class:`Group` for it, and the tally counts each answer in its replica's group too.

    >>> owners = (("east", 3), ("west", 3))  # the coordinator's datacenter first
    >>> Quorum.parse("quorum", None, owners)
    Quorum(ack=4, copies=6, groups=())
    >>> Quorum.parse("local_quorum", None, owners, read=True)  # a read asks the local owners only
    Quorum(ack=2, copies=3, groups=())
    >>> each = Quorum.parse("each_quorum", None, owners)
    >>> tally = QuorumTally(each)
    >>> [tally.succeed(each.group_of("east")) for _ in range(3)]  # the east's majority, not yet the west's
    [False, False, False]
    >>> tally.fail(each.group_of("west")), tally.fail(each.group_of("west"))
    (False, True)
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["NO_GROUP", "BadQuorum", "Consistency", "Group", "Quorum", "QuorumTally"]

NO_GROUP = -1  # the group of a replica whose datacenter the rule does not count apart


class BadQuorum(ValueError):
    """ack/from parameters a request may not ask for; the message is the client's one-line reason."""


class Consistency(enum.Enum):
    """A consistency level by name: how many of a key's owners, where, must answer."""

    ONE = "one"
    QUORUM = "quorum"
    LOCAL_QUORUM = "local_quorum"  # a majority of the owners in the coordinator's datacenter
    EACH_QUORUM = "each_quorum"  # a majority in every datacenter
    ALL = "all"


_NAMES = ", ".join(level.value for level in Consistency)


@dataclass(frozen=True, slots=True)
class Group:
    """The replicas of one datacenter that a rule counts apart: ``ack`` of its ``copies`` must succeed."""

    datacenter: str
    ack: int
    copies: int


@dataclass(frozen=True, slots=True)
class Quorum:
    """A request's ``ack`` of ``copies``: ``copies`` is its ``from``, the key's first owners written (a
    record says it as Record.copies) or asked, and ``ack`` how many must answer; and ``groups``, the
    datacenters whose replicas must each make up their own ack as well (none: only the total counts)."""

    ack: int
    copies: int  # the request's `from`
    groups: tuple[Group, ...] = ()

    @classmethod
    def parse(
        cls,
        ack: str | None,
        copies: str | None,
        owners: int | Sequence[tuple[str, int]],
        *,
        read: bool = False,
    ) -> Quorum:
        """Validate the query parameters against a key's owners: their number N, or how many each
        datacenter has (the coordinator's first). Defaults are from = N, ack = from // 2 + 1; a named
        ``ack`` is :meth:`named`, for a read when ``read``.

        >>> Quorum.parse(None, None, 3)
        Quorum(ack=2, copies=3, groups=())
        """
        by_datacenter = (("", owners),) if isinstance(owners, int) else tuple(owners)
        replication = sum(n for _, n in by_datacenter)
        level = _level(ack)
        if level is not None:
            if copies is not None:
                raise BadQuorum(
                    f"from goes without a named ack: ack={level.value} counts the key's owners itself "
                    "(leave from out, or give ack as a number)"
                )
            return cls.named(level, by_datacenter, read=read)
        n = replication if copies is None else _positive(copies, "from")
        if n > replication:
            raise BadQuorum(f"from={n} exceeds the replication factor N={replication}")
        a = n // 2 + 1 if ack is None else _positive(ack, "ack")
        if a > n:
            raise BadQuorum(f"ack={a} exceeds from={n}")
        return cls(a, n)

    @classmethod
    def named(cls, level: Consistency, owners: Sequence[tuple[str, int]], *, read: bool = False) -> Quorum:
        """The quorum of ``level`` over a key's owners, how many in each datacenter (the coordinator's
        first, as placement orders them). Every owner is written; a ``local_quorum`` read asks only the
        local ones (the first of the order). Raises BadQuorum for ``local_quorum`` on a coordinator whose
        datacenter holds no copies.

        >>> Quorum.named(Consistency.LOCAL_QUORUM, (("east", 3), ("west", 2)))
        Quorum(ack=2, copies=5, groups=(Group(datacenter='east', ack=2, copies=3),))
        """
        total = sum(n for _, n in owners)
        if level is Consistency.ONE:
            return cls(1, total)
        if level is Consistency.QUORUM:
            return cls(total // 2 + 1, total)
        if level is Consistency.ALL:
            return cls(total, total)
        if level is Consistency.LOCAL_QUORUM:
            home, local = owners[0]
            if not local:
                raise BadQuorum(
                    f"ack=local_quorum counts the owners in this node's datacenter {home}, which holds no "
                    "copies: ask a node in a datacenter that does"
                )
            majority = local // 2 + 1
            if read or local == total:
                return cls(majority, local)
            return cls(majority, total, (Group(home, majority, local),))
        groups = tuple(Group(name, n // 2 + 1, n) for name, n in owners if n)
        return cls(sum(group.ack for group in groups), total, groups if len(groups) > 1 else ())

    def group_of(self, datacenter: str) -> int:
        """The index of ``datacenter``'s group, NO_GROUP when the rule does not count it apart."""
        for index, group in enumerate(self.groups):
            if group.datacenter == datacenter:
                return index
        return NO_GROUP

    def with_pending(self, datacenters: Sequence[str]) -> Quorum:
        """This quorum over more replicas (owners a change is adding, in ``datacenters``), each of which
        must confirm as well: in the total, and in its datacenter's group when it has one."""
        if not self.groups:
            return Quorum(self.ack + len(datacenters), self.copies + len(datacenters))
        added = [datacenters.count(group.datacenter) for group in self.groups]
        groups = tuple(
            Group(group.datacenter, group.ack + more, group.copies + more)
            for group, more in zip(self.groups, added, strict=True)
        )
        return Quorum(self.ack + sum(added), self.copies + len(datacenters), groups)


def _level(ack: str | None) -> Consistency | None:
    """The level ``ack`` names, None when it is a number (or absent)."""
    if ack is None or ack[:1].isdigit():
        return None
    try:
        return Consistency(ack.lower())
    except ValueError:
        raise BadQuorum(f"ack must be a positive integer or one of {_NAMES}, got {ack[:40]!r}") from None


_MAX_DIGITS = 9  # no cluster is that large; and int() refuses strings of thousands of digits


def _positive(text: str, name: str) -> int:
    digits = text.lstrip("0")
    if not text.isascii() or not text.isdigit() or not digits:
        raise BadQuorum(f"{name} must be a positive integer, got {text[:40]!r}")
    if len(digits) > _MAX_DIGITS:
        raise BadQuorum(f"{name}={digits[:12]}... is larger than any cluster")
    return int(digits)


class QuorumTally:
    """Counts replica answers for one request, in total and in each group's, and says when its outcome is
    known: each count says whether it settled the outcome, so a fan-out asks nothing more per answer.

    >>> tally = QuorumTally(Quorum(ack=2, copies=3))
    >>> tally.fail(), tally.fail(), tally.impossible
    (False, True, True)
    """

    __slots__ = ("failures", "group_failures", "group_successes", "quorum", "successes")

    def __init__(self, quorum: Quorum) -> None:
        self.quorum = quorum
        self.successes = 0
        self.failures = 0
        groups = len(quorum.groups)
        self.group_successes = [0] * groups  # by group, as quorum.groups lists them
        self.group_failures = [0] * groups

    def succeed(self, group: int = NO_GROUP) -> bool:
        """Count a success of a replica in ``group``; whether the quorum is reached now."""
        self.successes += 1
        if group != NO_GROUP:
            self.group_successes[group] += 1
        return self.successes >= self.quorum.ack and (not self.quorum.groups or self._groups_reached())

    def fail(self, group: int = NO_GROUP) -> bool:
        """Count a failure of a replica in ``group``; whether the quorum is out of reach now."""
        self.failures += 1
        if group != NO_GROUP:
            self.group_failures[group] += 1
        return self.impossible

    @property
    def reached(self) -> bool:
        return self.successes >= self.quorum.ack and (not self.quorum.groups or self._groups_reached())

    @property
    def impossible(self) -> bool:
        """So many replicas failed that the rest cannot make up ack any more, in total or in a group."""
        quorum = self.quorum
        if quorum.copies - self.failures < quorum.ack:
            return True
        return bool(quorum.groups) and any(
            group.copies - failures < group.ack
            for group, failures in zip(quorum.groups, self.group_failures, strict=True)
        )

    def _groups_reached(self) -> bool:
        return all(
            successes >= group.ack
            for group, successes in zip(self.quorum.groups, self.group_successes, strict=True)
        )

    def shortfall(self) -> str:
        """The groups that have not made up their ack, as `` (DC: k of n answered, a needed; ...)``; ""
        when none has a group of its own."""
        short = [
            f"{group.datacenter}: {successes} of {group.copies} answered, {group.ack} needed"
            for group, successes in zip(self.quorum.groups, self.group_successes, strict=True)
            if successes < group.ack
        ]
        return f" ({'; '.join(short)})" if short else ""
