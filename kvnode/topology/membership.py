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

Every member has a zone and a datacenter (kvnode.topology.placement places a key's owners in distinct zones,
and N of them in each datacenter, N being the factor's for that datacenter): the first members' from
``--zones`` and ``--datacenters`` (lists in the order of ``--cluster``), a joining node's from ``--zone`` and
``--datacenter``, a replacing node's its predecessor's. By default a member's zone is its host and its
datacenter ``dc1``; a membership stored before there were any decodes with those, so its placement is the
one it had. Like ``--cluster``, a ``--zones`` or ``--datacenters`` that differs from what is stored is named
in a warning and ignored.

    >>> first = Membership.seeded(["http://a:1", "http://b:1"])
    >>> first.version, first.urls, first.tokens, str(first.replication)
    (1, ('http://a:1', 'http://b:1'), ('http://a:1', 'http://b:1'), '2')
    >>> first.zones, first.datacenters
    (('a', 'b'), ('dc1', 'dc1'))
    >>> str(first.with_joining("http://c:1").replication)
    '2'
    >>> resizing = first.resized(1)
    >>> resizing.placement().replication, resizing.read_placement().replication
    (2, 2)
    >>> str(resizing.resettled().replication), resizing.resettled().placement().replication
    ('1', 1)
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
    >>> spread = Membership.seeded(["http://a:1", "http://b:1"], 1, datacenters=["east", "west"])
    >>> str(spread.replication), spread.placement(home="west").owners_by_datacenter
    ('1', (('west', 1), ('east', 1)))
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kvnode.config import DEFAULT_DATACENTER, ReplicationFactor
from kvnode.topology.placement import Placement, host_of

__all__ = ["ChangeRefused", "Membership", "at_start", "cluster_identity", "own_place_warnings"]


def cluster_identity(first_members: Sequence[str]) -> str:
    """Names one cluster for its whole life: the hash of the list its first members started with (a node
    of another cluster with the same secret and URL is refused)."""
    return hashlib.sha256("\n".join(first_members).encode()).hexdigest()


class ChangeRefused(Exception):
    """A membership change that cannot be made; the message says why, in one line."""


@dataclass(frozen=True, slots=True)
class Membership:
    """The cluster's identity, and its members' URLs (in the cluster's order) at one version, with each
    member's placement token (the URL it first joined with, kept by a node that replaces it), zone and
    datacenter (by default its token's host, and DEFAULT_DATACENTER), the member joining or leaving, if
    one is, and the replication factor N (each key's owners in a datacenter: the first N of its placement
    order there, or every member there while there are fewer). One joining takes writes for the keys it
    will own, and no reads until it holds them; for one leaving, the keys' next owners take writes while
    reads stay on the present ones until they hold them (Cassandra's pending ranges)."""

    cluster: str
    version: int
    urls: tuple[str, ...]
    tokens: tuple[str, ...]
    joining: frozenset[str] = frozenset()
    leaving: frozenset[str] = frozenset()
    replication: ReplicationFactor = field(kw_only=True)  # N
    next_replication: ReplicationFactor | None = field(default=None, kw_only=True)  # the N moved to
    zones: tuple[str, ...] = field(default=(), kw_only=True)  # each member's, in the order of urls
    datacenters: tuple[str, ...] = field(default=(), kw_only=True)  # each member's, likewise

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
        for factor in (self.replication, self.next_replication):
            if factor is not None and not factor.by_datacenter and factor.every < 1:
                raise ValueError(f"a replication factor is at least 1, got {factor}")
        if self.next_replication is not None and (self.joining or self.leaving):
            raise ValueError("the replication factor changes only while no member joins or leaves")
        # Not given (a membership older than zones, or a new one): each member's host, one datacenter.
        if not self.zones:
            object.__setattr__(self, "zones", tuple(host_of(token) for token in self.tokens))
        if not self.datacenters:
            object.__setattr__(self, "datacenters", (DEFAULT_DATACENTER,) * len(self.urls))
        if not len(self.zones) == len(self.datacenters) == len(self.urls):
            raise ValueError("every member needs a zone and a datacenter")

    @classmethod
    def seeded(
        cls,
        first_members: Sequence[str],
        replication: ReplicationFactor | int = 0,
        zones: Sequence[str] = (),
        datacenters: Sequence[str] = (),
    ) -> Membership:
        """A new cluster's membership, from the list its first members start with, their zones and
        datacenters (in the same order; by default each one's host, and one datacenter) and its
        replication factor (0, or not given: in each datacenter, the number of its first members)."""
        members = tuple(first_members)
        factor = ReplicationFactor(replication) if isinstance(replication, int) else replication
        placed = cls(
            cluster_identity(members), 1, members, members, replication=ReplicationFactor(len(members)),
            zones=tuple(zones), datacenters=tuple(datacenters),
        )  # fmt: skip
        if not factor:
            factor = ReplicationFactor.default_for(placed.members_by_datacenter())
        return replace(placed, replication=factor)

    def replaced(self, member: str, newcomer: str) -> Membership:
        """The next version, with ``newcomer`` in ``member``'s place: its position in the order and its
        placement token, so that every key keeps its replicas but that one. Raises ChangeRefused."""
        if newcomer in self.urls:
            raise ChangeRefused(f"{newcomer} is a member already")
        self._no_change_under_way()
        if member not in self.urls:
            raise ChangeRefused(f"{member} is not a member (members: {','.join(self.urls)})")
        members = [
            (newcomer if url == member else url, token, zone, datacenter)
            for url, token, zone, datacenter in self._members_but(frozenset())
        ]
        return self._next(members)

    def with_joining(self, newcomer: str, zone: str = "", datacenter: str = "") -> Membership:
        """The next version, with ``newcomer`` a member that joins (its token its URL), in ``zone`` and
        ``datacenter`` (by default its host, and DEFAULT_DATACENTER). Raises ChangeRefused: one change at
        a time, as every change is made."""
        if newcomer in self.urls:
            raise ChangeRefused(f"{newcomer} is a member already")
        self._no_change_under_way()
        placed = (newcomer, newcomer, zone or host_of(newcomer), datacenter or DEFAULT_DATACENTER)
        return self._next([*self._members_but(frozenset()), placed], joining=frozenset({newcomer}))

    def settled(self, member: str) -> Membership:
        """The next version, with ``member``, which joined, a member like the others."""
        if member not in self.joining:
            raise ChangeRefused(f"{member} is not joining")
        return self._next(self._members_but(frozenset()))

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
        return self._next(self._members_but(self.joining))

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
        return self._next(self._members_but(frozenset()), leaving=frozenset({member}))

    def removed(self, member: str) -> Membership:
        """The next version, without ``member``, which was leaving."""
        if member not in self.leaving:
            raise ChangeRefused(f"{member} is not leaving")
        return self._next(self._members_but(self.leaving))

    def resized(self, replication: ReplicationFactor | int) -> Membership:
        """The next version, moving to ``replication`` owners a key in each datacenter (an int: the same in
        every one). Raises ValueError for a factor that does not fit the members (one out of 1..members in
        a datacenter, a datacenter misnamed or left out), ChangeRefused while another change is under way
        or for the factor it has."""
        members = self.members_by_datacenter()
        if isinstance(replication, int):
            if replication < 1 or (len(members) == 1 and replication > len(self.urls)):
                raise ValueError(
                    f"a replication factor is from 1 to the {len(self.urls)} members, not {replication}"
                )
            replication = ReplicationFactor(replication)
        replication.check(members)
        self._no_change_under_way()
        if all(replication.of(name) == self.replication.of(name) for name in members):
            raise ChangeRefused(f"the replication factor is {replication} already")
        return replace(self, version=self.version + 1, next_replication=replication)

    def resettled(self) -> Membership:
        """The next version, with the replication factor moved to counting as every key's N."""
        if self.next_replication is None:
            raise ChangeRefused("the replication factor is not changing")
        return replace(
            self, version=self.version + 1, replication=self.next_replication, next_replication=None
        )

    @property
    def changing(self) -> bool:
        """Whether a change is under way: a member joining or leaving, or a new replication factor."""
        return bool(self.joining or self.leaving) or self.next_replication is not None

    def _next(
        self,
        members: list[tuple[str, str, str, str]],
        joining: frozenset[str] = frozenset(),
        leaving: frozenset[str] = frozenset(),
    ) -> Membership:
        """The next version with these members (URL, token, zone, datacenter); the replication factor
        stays (a change adds room)."""
        urls, tokens, zones, datacenters = (tuple(column) for column in zip(*members, strict=True))
        return Membership(
            self.cluster, self.version + 1, urls, tokens, joining, leaving, replication=self.replication,
            zones=zones, datacenters=datacenters,
        )  # fmt: skip

    def _no_change_under_way(self) -> None:
        for url in self.joining | self.leaving:
            raise ChangeRefused(f"a change is under way: {url} is {self.state_of(url)}; one change at a time")
        if self.next_replication is not None:
            raise ChangeRefused(
                f"a change is under way: the replication factor moves from {self.replication} to "
                f"{self.next_replication}; one change at a time"
            )

    def placement(self, home: str = "") -> Placement:
        """Where keys are written under this membership: every member but one leaving (one joining too),
        to the owners under both replication factors while it changes; ``home``: the datacenter whose
        owners come first (the node's own; by default the first by name)."""
        return self.placement_without(self.leaving, home, coming=True)

    def read_placement(self, home: str = "") -> Placement | None:
        """Where keys are read during a change: every member but one joining (one leaving too), by the
        present replication factor; None when no change is under way (the same as :meth:`placement`)."""
        if not self.changing:
            return None
        return self.placement_without(self.joining, home)

    def placement_without(
        self, left_out: Collection[str], home: str = "", *, coming: bool = False
    ) -> Placement:
        """The placement of every member but ``left_out``, ``home``'s owners first, by the present
        replication factor; with ``coming``, by the larger of it and the one it moves to, in each
        datacenter."""
        factors = [self.replication]
        if coming and self.next_replication is not None:
            factors.append(self.next_replication)
        counts = {name: max(factor.of(name) for factor in factors) for name in self.datacenters}
        urls, tokens, zones, datacenters = zip(*self._members_but(left_out), strict=True)
        return Placement(urls, tokens, counts, zones=zones, datacenters=datacenters, home=home)

    def _members_but(self, left_out: Collection[str]) -> list[tuple[str, str, str, str]]:
        """Each member but ``left_out``: its URL, token, zone and datacenter, in the cluster's order."""
        columns = (self.urls, self.tokens, self.zones, self.datacenters)
        return [member for member in zip(*columns, strict=True) if member[0] not in left_out]

    def zone_of(self, url: str) -> str:
        return self.zones[self.urls.index(url)]

    def datacenter_of(self, url: str) -> str:
        return self.datacenters[self.urls.index(url)]

    def home_of(self, url: str) -> str:
        """The datacenter whose owners ``url``'s placements list first: its own ("" while it is no member)."""
        return self.datacenter_of(url) if url in self.urls else ""

    def members_by_datacenter(self) -> dict[str, int]:
        """How many members each datacenter has, by name."""
        return {name: self.datacenters.count(name) for name in sorted(set(self.datacenters))}

    def state_of(self, url: str) -> str:
        """``joining``, ``leaving`` or ``normal``."""
        return "joining" if url in self.joining else "leaving" if url in self.leaving else "normal"

    def described(self) -> dict[str, Any]:
        """What ``/v0/status`` and ``/v0/cluster`` say of it: the members, their tokens, zones and
        datacenters (in the cluster's order), the identity, the version, the replication factor (an int:
        the same N in every datacenter; else each one's) and the one moved to (0: none), who joins or
        leaves."""
        coming = self.next_replication
        return {
            "cluster": list(self.urls),
            "tokens": list(self.tokens),
            "zones": list(self.zones),
            "datacenters": list(self.datacenters),
            "cluster_id": self.cluster,
            "membership_version": self.version,
            "replication_factor": self.replication.to_json(),
            "next_replication_factor": 0 if coming is None else coming.to_json(),
            "joining": sorted(self.joining),
            "leaving": sorted(self.leaving),
        }

    @classmethod
    def from_described(cls, view: Mapping[str, Any]) -> Membership:
        """The membership :meth:`described` says (a node's ``/v0/status`` or ``/v0/cluster``), as a client
        or a tool reads it; one from a node older than zones and datacenters, or without a version or an
        identity, with their defaults. Raises ValueError, KeyError or TypeError for a view it cannot read.

        >>> first = Membership.seeded(["http://a:1", "http://b:1"], datacenters=["east", "west"])
        >>> Membership.from_described(first.described()) == first
        True
        """
        urls = tuple(str(url) for url in view["cluster"])
        coming = view.get("next_replication_factor", 0)
        return cls(
            str(view.get("cluster_id", "")),
            int(view.get("membership_version", 1)),
            urls,
            tuple(str(token) for token in view.get("tokens", urls)),
            frozenset(view.get("joining", ())),
            frozenset(view.get("leaving", ())),
            replication=ReplicationFactor.from_json(view.get("replication_factor", len(urls))),
            next_replication=None if coming == 0 else ReplicationFactor.from_json(coming),
            zones=tuple(str(zone) for zone in view.get("zones", ())),
            datacenters=tuple(str(datacenter) for datacenter in view.get("datacenters", ())),
        )

    def encode(self) -> bytes:
        members = [
            {"url": url, "token": token, "state": self.state_of(url), "zone": zone, "datacenter": datacenter}
            for url, token, zone, datacenter in self._members_but(frozenset())
        ]
        coming = self.next_replication
        fields = {
            "cluster": self.cluster,
            "version": self.version,
            "replication_factor": self.replication.to_json(),
            "next_replication_factor": 0 if coming is None else coming.to_json(),
            "members": members,
        }
        return json.dumps(fields).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Membership:
        """Raises ValueError for anything :meth:`encode` did not write. One stored before the replication
        factor was has every member own every key, as it did then; one stored before zones and
        datacenters were has each member's zone its host, and one datacenter."""
        try:
            fields = json.loads(raw)
            cluster, version, members = fields["cluster"], fields["version"], fields["members"]
            replication = ReplicationFactor.from_json(fields.get("replication_factor", len(members)))
            coming = fields.get("next_replication_factor", 0)
            next_replication = None if coming == 0 else ReplicationFactor.from_json(coming)
            urls = tuple(member["url"] for member in members)
            tokens = tuple(member["token"] for member in members)
            states = tuple(member["state"] for member in members)
            zones = tuple(member.get("zone", host_of(member["token"])) for member in members)
            datacenters = tuple(member.get("datacenter", DEFAULT_DATACENTER) for member in members)
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            raise ValueError(f"not a stored membership: {error!r}") from error
        if not (isinstance(cluster, str) and type(version) is int):
            raise ValueError("not a stored membership: a field has the wrong type")
        if not all(isinstance(text, str) for text in urls + tokens + zones + datacenters):
            raise ValueError(
                "not a stored membership: a member's URL, token, zone or datacenter is not a string"
            )
        if not set(states) <= {"normal", "joining", "leaving"}:
            raise ValueError("not a stored membership: a member's state is not normal, joining or leaving")
        joining = frozenset(url for url, state in zip(urls, states, strict=True) if state == "joining")
        leaving = frozenset(url for url, state in zip(urls, states, strict=True) if state == "leaving")
        return cls(
            cluster, version, urls, tokens, joining, leaving, replication=replication,
            next_replication=next_replication, zones=zones, datacenters=datacenters,
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
    stored: Membership | None,
    flag: Sequence[str],
    replication: ReplicationFactor | int = 0,
    own: str = "",
    zones: Sequence[str] = (),
    datacenters: Sequence[str] = (),
) -> tuple[Membership, list[str]]:
    """The membership a node runs with, given what its system database holds (None at its first start),
    its ``--cluster`` members (empty: not given, as a restart on its data dir has it: a first start seeds
    a cluster of ``own`` alone), its ``--replication-factor`` (0: not given), its ``--zones`` and
    ``--datacenters`` (in the order of ``--cluster``; () not given); and a warning line for each flag given
    that differs from what is stored."""
    if stored is None:
        return Membership.seeded(flag or (own,), replication, zones, datacenters), []
    warnings = []
    difference = stored.difference(flag) if flag else ""
    if difference:
        warnings.append(
            f"--cluster differs from the stored membership (version {stored.version}), which this node "
            f"keeps: {difference}"
        )
    factor = ReplicationFactor(replication) if isinstance(replication, int) else replication
    if factor and factor != stored.replication:
        warnings.append(
            f"--replication-factor {factor} differs from the stored replication factor "
            f"{stored.replication}, which this node keeps"
        )
    for name, given, kept in (("zone", zones, stored.zones), ("datacenter", datacenters, stored.datacenters)):
        places = dict(zip(stored.urls, kept, strict=True))
        moved = [
            f"{url} is in {name} {places[url]}, not {place}"
            for url, place in zip(flag, given, strict=False)  # () when not given
            if url in places and places[url] != place
        ]
        if moved:
            warnings.append(
                f"--{name}s differs from the stored membership (version {stored.version}), which this node "
                f"keeps: {'; '.join(moved)}"
            )
    return stored, warnings


def own_place_warnings(stored: Membership, own: str, zone: str, datacenter: str) -> list[str]:
    """A warning line for a member started with ``--zone`` or ``--datacenter`` (a node that joined,
    started again) other than the ones the stored membership gives it, which it keeps.

    >>> joined = Membership.seeded(["http://a:1"]).with_joining("http://b:1", "r2", "east")
    >>> print(*own_place_warnings(joined, "http://b:1", "r3", ""))
    --zone r3 differs from the stored membership (version 2), which this node keeps: http://b:1 is in zone r2
    """
    if own not in stored.urls:
        return []  # not a member: the node says so and stops
    warnings = []
    for name, given, kept in (
        ("zone", zone, stored.zone_of(own)),
        ("datacenter", datacenter, stored.datacenter_of(own)),
    ):
        if given and given != kept:
            warnings.append(
                f"--{name} {given} differs from the stored membership (version {stored.version}), which "
                f"this node keeps: {own} is in {name} {kept}"
            )
    return warnings
