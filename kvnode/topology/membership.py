"""A cluster's identity and membership, as stored data (pure).

The first members start with the same ``--cluster`` list; each derives the cluster identity from it (a hash of
the list, so they agree without talking) and stores both at its first start. From then on the stored
membership rules: a ``--cluster`` that differs from it is named in one warning line and ignored. The replica
handshake proves the identity (kvnode.replica.channel.handshake), not the member list, and carries the
membership version, so members at different versions still talk.

The replication factor N (how many members own each key) is stored with the membership, set at the first
start (``--replication-factor``, by default the number of first members) and kept by a join, a leave or a
replace: a join adds room, not copies. A flag that differs from the stored N is named in a warning and
ignored. ``admin replication-factor`` changes it as a change of its own (:meth:`Membership.resized`):
writes go to the owners under both factors and reads stay with the present N until the claimant has
streamed the new copies, then the next version has the new N (:meth:`Membership.resettled`).

    >>> first = Membership.seeded(["http://a:1", "http://b:1"])
    >>> first.version, first.urls, first.tokens, first.replication
    (1, ('http://a:1', 'http://b:1'), ('http://a:1', 'http://b:1'), 2)
    >>> first.with_joining("http://c:1").replication
    2
    >>> resizing = first.resized(1)
    >>> resizing.placement().replication, resizing.read_placement().replication
    (2, 2)
    >>> resizing.resettled().replication, resizing.resettled().placement().replication
    (1, 1)
    >>> first.with_joining("http://c:1").undone("http://c:1").urls  # a join that never came, undone
    ('http://a:1', 'http://b:1')
    >>> Membership.decode(first.encode()) == first
    True
    >>> running, warnings = at_start(first, ["http://a:1", "http://c:1"], replication=3)
    >>> running == first
    True
    >>> print(warnings[0].replace(": ", ":\\n").replace("; ", ";\\n"))
    --cluster differs from the stored membership (version 1), which this node keeps:
    http://b:1 is a member and not in --cluster;
    http://c:1 is in --cluster and not a member
    >>> warnings[1]
    '--replication-factor 3 differs from the stored replication factor 2, which this node keeps'
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from kvnode.topology.placement import Placement

__all__ = ["ChangeRefused", "Membership", "at_start", "cluster_identity"]


def cluster_identity(first_members: Sequence[str]) -> str:
    """Names one cluster for its whole life: the hash of the list its first members started with (a node
    of another cluster with the same secret and URL is refused)."""
    return hashlib.sha256("\n".join(first_members).encode()).hexdigest()


class ChangeRefused(Exception):
    """A membership change that cannot be made; the message says why, in one line."""


@dataclass(frozen=True, slots=True)
class Membership:
    """The cluster's identity, and its members' URLs (in the cluster's order) at one version, with each
    member's placement token (the URL it first joined with, kept by a node that replaces it), the member
    joining or leaving, if one is, and the replication factor N (each key's owners: the first N of its
    placement order, or every member while there are fewer). One joining takes writes for the keys it
    will own, and no reads until it holds them; for one leaving, the keys' next owners take writes while
    reads stay on the present ones until they hold them (Cassandra's pending ranges)."""

    cluster: str
    version: int
    urls: tuple[str, ...]
    tokens: tuple[str, ...]
    joining: frozenset[str] = frozenset()
    leaving: frozenset[str] = frozenset()
    replication: int = field(kw_only=True)  # N
    next_replication: int = field(default=0, kw_only=True)  # the N being moved to (0: none)

    def __post_init__(self) -> None:
        if self.version < 1:
            raise ValueError(f"a membership version starts at 1, got {self.version}")
        if not self.urls:
            raise ValueError("a membership needs at least one member")
        if len(set(self.urls)) != len(self.urls):
            raise ValueError("a membership names a member twice")
        if len(self.tokens) != len(self.urls) or len(set(self.tokens)) != len(self.tokens):
            raise ValueError("every member needs a placement token of its own")
        if not (self.joining | self.leaving) <= set(self.urls) or len(self.joining | self.leaving) > 1:
            raise ValueError("one member at most joins or leaves at a time, and it is a member")
        if len(self.urls) == 1 and (self.joining or self.leaving):
            raise ValueError("the only member neither joins nor leaves")
        if self.replication < 1:
            raise ValueError(f"a replication factor is at least 1, got {self.replication}")
        if self.next_replication and (self.joining or self.leaving):
            raise ValueError("the replication factor changes only while no member joins or leaves")
        if self.next_replication and not 1 <= self.next_replication <= len(self.urls):
            raise ValueError(f"the next replication factor is from 1 to {len(self.urls)}")

    @classmethod
    def seeded(cls, first_members: Sequence[str], replication: int = 0) -> Membership:
        """A new cluster's membership, from the list its first members start with and its replication
        factor (0: the number of first members)."""
        members = tuple(first_members)
        return cls(cluster_identity(members), 1, members, members, replication=replication or len(members))

    def replaced(self, member: str, newcomer: str) -> Membership:
        """The next version, with ``newcomer`` in ``member``'s place: its position in the order and its
        placement token, so that every key keeps its replicas but that one. Raises ChangeRefused."""
        if newcomer in self.urls:
            raise ChangeRefused(f"{newcomer} is a member already")
        self._no_change_under_way()
        if member not in self.urls:
            raise ChangeRefused(f"{member} is not a member (members: {','.join(self.urls)})")
        urls = tuple(newcomer if url == member else url for url in self.urls)
        return self._next(urls, self.tokens)

    def with_joining(self, newcomer: str) -> Membership:
        """The next version, with ``newcomer`` a member that joins (its token its URL). Raises
        ChangeRefused: one change at a time, as every change is made."""
        if newcomer in self.urls:
            raise ChangeRefused(f"{newcomer} is a member already")
        self._no_change_under_way()
        return self._next((*self.urls, newcomer), (*self.tokens, newcomer), joining=frozenset({newcomer}))

    def settled(self, member: str) -> Membership:
        """The next version, with ``member``, which joined, a member like the others."""
        if member not in self.joining:
            raise ChangeRefused(f"{member} is not joining")
        return self._next(self.urls, self.tokens)

    def undone(self, member: str) -> Membership:
        """The next version without ``member``, which claimed a join and never came: the members of before
        its claim, in their order with their tokens (a join only added it). Raises ChangeRefused for any
        other member: one like the others leaves (:meth:`with_leaving`), one leaving goes on with it."""
        if member not in self.urls:
            raise ChangeRefused(f"{member} is not a member (members: {','.join(self.urls)})")
        if member in self.leaving:
            raise ChangeRefused(f"{member} is leaving, not joining: its leave goes on until it is removed")
        if member not in self.joining:
            raise ChangeRefused(f"{member} is a member like the others, not joining: admin leave removes it")
        return self._next(*_columns(self._members_but(self.joining)))

    @property
    def claimant(self) -> str:
        """The member that orders changes: the first in the cluster's order that is not joining. A change
        is offered to the claimant of the version it makes before anyone else (change_steps.offer_order),
        and the changes made from one version all have the same claimant (a change adds a member joining
        at the end, marks one leaving, or drops the one joining or leaving), so of two made at once it
        takes one and refuses the other. A member leaving stays the claimant until it is removed."""
        return next(url for url in self.urls if url not in self.joining)

    def with_leaving(self, member: str) -> Membership:
        """The next version, with ``member`` leaving. Raises ChangeRefused."""
        if member not in self.urls:
            raise ChangeRefused(f"{member} is not a member (members: {','.join(self.urls)})")
        self._no_change_under_way()
        if len(self.urls) == 1:
            raise ChangeRefused(f"{member} is the only member")
        return self._next(self.urls, self.tokens, leaving=frozenset({member}))

    def removed(self, member: str) -> Membership:
        """The next version, without ``member``, which was leaving."""
        if member not in self.leaving:
            raise ChangeRefused(f"{member} is not leaving")
        return self._next(*_columns(self._members_but(self.leaving)))

    def resized(self, replication: int) -> Membership:
        """The next version, moving to ``replication`` owners a key. Raises ValueError for a factor out of
        1..members, ChangeRefused while another change is under way or for the factor it has."""
        if not 1 <= replication <= len(self.urls):
            raise ValueError(
                f"a replication factor is from 1 to the {len(self.urls)} members, not {replication}"
            )
        self._no_change_under_way()
        if replication == self.replication:
            raise ChangeRefused(f"the replication factor is {replication} already")
        return replace(self, version=self.version + 1, next_replication=replication)

    def resettled(self) -> Membership:
        """The next version, with the replication factor moved to counting as every key's N."""
        if not self.next_replication:
            raise ChangeRefused("the replication factor is not changing")
        return replace(self, version=self.version + 1, replication=self.next_replication, next_replication=0)

    @property
    def changing(self) -> bool:
        """Whether a change is under way: a member joining or leaving, or a new replication factor."""
        return bool(self.joining or self.leaving or self.next_replication)

    def _next(
        self,
        urls: tuple[str, ...],
        tokens: tuple[str, ...],
        joining: frozenset[str] = frozenset(),
        leaving: frozenset[str] = frozenset(),
    ) -> Membership:
        """The next version with these members; the replication factor stays (a change adds room)."""
        return Membership(
            self.cluster, self.version + 1, urls, tokens, joining, leaving, replication=self.replication
        )

    def _no_change_under_way(self) -> None:
        for url in self.joining | self.leaving:
            raise ChangeRefused(f"a change is under way: {url} is {self.state_of(url)}; one change at a time")
        if self.next_replication:
            raise ChangeRefused(
                f"a change is under way: the replication factor moves from {self.replication} to "
                f"{self.next_replication}; one change at a time"
            )

    def placement(self) -> Placement:
        """Where keys are written under this membership: every member but one leaving (one joining too),
        to the owners under both replication factors while it changes."""
        replication = max(self.replication, self.next_replication)
        return Placement(*_columns(self._members_but(self.leaving)), replication=replication)

    def read_placement(self) -> Placement | None:
        """Where keys are read during a change: every member but one joining (one leaving too), by the
        present replication factor; None when no change is under way (the same as :meth:`placement`)."""
        if not self.changing:
            return None
        return Placement(*_columns(self._members_but(self.joining)), replication=self.replication)

    def _members_but(self, left_out: frozenset[str]) -> list[tuple[str, str]]:
        return [
            (url, token) for url, token in zip(self.urls, self.tokens, strict=True) if url not in left_out
        ]

    def state_of(self, url: str) -> str:
        """``joining``, ``leaving`` or ``normal``."""
        return "joining" if url in self.joining else "leaving" if url in self.leaving else "normal"

    def encode(self) -> bytes:
        members = [
            {"url": url, "token": token, "state": self.state_of(url)}
            for url, token in zip(self.urls, self.tokens, strict=True)
        ]
        fields = {
            "cluster": self.cluster,
            "version": self.version,
            "replication_factor": self.replication,
            "next_replication_factor": self.next_replication,
            "members": members,
        }
        return json.dumps(fields).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Membership:
        """Raises ValueError for anything :meth:`encode` did not write. One stored before the replication
        factor was has every member own every key, as it did then."""
        try:
            fields = json.loads(raw)
            cluster, version, members = fields["cluster"], fields["version"], fields["members"]
            replication = fields.get("replication_factor", len(members))
            next_replication = fields.get("next_replication_factor", 0)
            urls = tuple(member["url"] for member in members)
            tokens = tuple(member["token"] for member in members)
            states = tuple(member["state"] for member in members)
        except (ValueError, TypeError, KeyError) as error:
            raise ValueError(f"not a stored membership: {error!r}") from error
        numbers = (version, replication, next_replication)
        if not (isinstance(cluster, str) and all(type(number) is int for number in numbers)):
            raise ValueError("not a stored membership: a field has the wrong type")
        if not all(isinstance(text, str) for text in urls + tokens):
            raise ValueError("not a stored membership: a member's URL or token is not a string")
        if not set(states) <= {"normal", "joining", "leaving"}:
            raise ValueError("not a stored membership: a member's state is not normal, joining or leaving")
        joining = frozenset(url for url, state in zip(urls, states, strict=True) if state == "joining")
        leaving = frozenset(url for url, state in zip(urls, states, strict=True) if state == "leaving")
        return cls(
            cluster, version, urls, tokens, joining, leaving, replication=replication,
            next_replication=next_replication,
        )  # fmt: skip

    def difference(self, others: Sequence[str]) -> str:
        """What ``others`` (a member list) lacks and adds against this membership, "" when nothing (the
        order counts as well)."""
        missing = [url for url in self.urls if url not in others]
        added = [url for url in others if url not in self.urls]
        parts = [f"{url} is a member and not in --cluster" for url in missing]
        parts += [f"{url} is in --cluster and not a member" for url in added]
        if not parts and tuple(others) != self.urls:
            parts.append(f"--cluster lists the members in another order than {','.join(self.urls)}")
        return "; ".join(parts)


def at_start(
    stored: Membership | None, flag: Sequence[str], replication: int = 0, own: str = ""
) -> tuple[Membership, list[str]]:
    """The membership a node runs with, given what its system database holds (None at its first start),
    its ``--cluster`` members (empty: not given, as a restart on its data dir has it: a first start seeds
    a cluster of ``own`` alone) and its ``--replication-factor`` (0: not given); and a warning line for
    each flag given that differs from what is stored."""
    if stored is None:
        return Membership.seeded(flag or (own,), replication), []
    warnings = []
    difference = stored.difference(flag) if flag else ""
    if difference:
        warnings.append(
            f"--cluster differs from the stored membership (version {stored.version}), which this node "
            f"keeps: {difference}"
        )
    if replication and replication != stored.replication:
        warnings.append(
            f"--replication-factor {replication} differs from the stored replication factor "
            f"{stored.replication}, which this node keeps"
        )
    return stored, warnings


def _columns(members: list[tuple[str, str]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(URL, token) pairs as a tuple of URLs and one of tokens."""
    return tuple(url for url, _ in members), tuple(token for _, token in members)
