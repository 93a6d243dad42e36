"""Replica placement: which nodes hold a key, in which order, by rendezvous (highest-random-weight) hashing.

Every node scores every key with a keyed hash; the key's replicas are the nodes by descending score. The
order depends only on the key and the nodes' tokens (by default their URLs; kvnode.topology.membership keeps
each member's, so a node that replaces another takes its place), so every process agrees on it; ``from = k``
takes the first k, so a smaller ``from`` is a prefix of a larger one. Adding a node moves only the keys
it now scores highest on, about 1/(n+1) of them.

A key's *owners* are the first N of its order, N the cluster's replication factor (kvnode.topology.membership
keeps it): with N below the member count, each member owns about N/members of the keys, and a node
joining takes about N/(members+1) of them, one owner's share of each key it now owns.

Zones and hosts (failure domains): a machine may run several nodes (one per core), machines sit in zones
(a rack, an availability zone), and a key's replicas belong in distinct zones, then on distinct machines,
whenever there are enough. So the order takes each zone's best-scored node first (by score), then each
host's best of the others not on a host already taken, then the rest by score: the first ``zones``
replicas of every key are in distinct zones, and the next ones on hosts not used yet. A node's host is
the host part of its token (the URL it first joined with), so a replacement keeps its predecessor's place
on any machine; its zone is its host unless the membership says otherwise, which makes the zone tier the
host tier: with one node per host, or all on one host, this is plain rendezvous order.

Datacenters: each has its own N (Cassandra's NetworkTopologyStrategy), and a key's owners there are the
first N of that datacenter's order among its members (zones first, as above). The placement order lists
the owners datacenter by datacenter, then the other members the same way; which datacenter comes first is
the placement's ``home``: a node places keys with its own datacenter first (a request's ``from = k`` and a
``local_quorum`` read then take the nearest owners), the others after it by name. The *set* of a key's
owners does not depend on the home; only a version written to fewer than N replicas (a numeric ``from``)
lives on a prefix that the writing node's datacenter chose, which the members of that datacenter agree
on. A join, a leave or a replace in one datacenter moves no key in another.

Scoring is a few per cent of a request's CPU (docs/benchmarks.md measures it), so a Placement keeps the
orders of recent keys (at most ``_CACHED_KEYS`` keys of at most ``_CACHED_KEY_BYTES`` bytes, forgotten all
at once when full: a hot key is scored again at once). A placement never changes, so a cached order is never
stale: a new membership is a new Placement.

    >>> urls = [f"http://127.0.0.{i}:80" for i in range(1, 7)]
    >>> racks = Placement(urls, replication=3, zones=["a", "a", "b", "b", "c", "c"])
    >>> sorted(racks.zone_of(url) for url in racks.owners(b"user:42"))
    ['a', 'b', 'c']
    >>> two = Placement(urls, replication={"east": 2, "west": 1}, datacenters=["east"] * 3 + ["west"] * 3,
    ...                 home="west")
    >>> [two.datacenter_of(url) for url in two.owners(b"user:42")], two.owners_by_datacenter
    (['west', 'east', 'east'], (('west', 1), ('east', 2)))
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from kvnode.config import DEFAULT_DATACENTER

__all__ = ["Placement", "host_of", "replicas_for"]

_CACHED_KEYS = 16_384
_CACHED_KEY_BYTES = 128  # longer keys are scored every time: the cache stays under a few MB


def host_of(url: str) -> str:
    """The machine a node runs on, from its URL (or token): its host part. Loopback addresses such as
    127.0.0.1 and 127.0.0.2 are distinct hosts, so one machine can model several.

    >>> host_of("http://127.0.0.2:8081")
    '127.0.0.2'
    """
    return urlsplit(url).hostname or url


class Placement:
    """The replica order of keys over a fixed list of node URLs, scored by their tokens.

    >>> nodes = Placement(["http://a:1", "http://b:2", "http://c:3"])
    >>> nodes.replicas_for(b"user:42", 2) == nodes.replicas_for(b"user:42", 3)[:2]
    True
    """

    def __init__(
        self,
        nodes: Sequence[str],
        tokens: Sequence[str] = (),
        replication: int | Mapping[str, int] = 0,
        *,
        zones: Sequence[str] = (),
        datacenters: Sequence[str] = (),
        home: str = "",
    ) -> None:
        """``tokens``: what each node is scored by, in the order of ``nodes``; by default its URL.
        ``replication``: the owners of a key in each datacenter, N (0, or more than its nodes: every one of
        them), or each datacenter's by name (one not named: none). ``zones`` and ``datacenters``: each
        node's, in the order of ``nodes``; by default its host and DEFAULT_DATACENTER. ``home``: the
        datacenter whose owners come first (by default the first by name)."""
        if not nodes:
            raise ValueError("a placement needs at least one node")
        if len(set(nodes)) != len(nodes):
            raise ValueError("node URLs must be distinct")
        tokens = tuple(tokens) or tuple(nodes)
        if len(tokens) != len(nodes) or len(set(tokens)) != len(tokens):
            raise ValueError("every node needs a token of its own")
        self.nodes: tuple[str, ...] = tuple(nodes)
        self.tokens: tuple[str, ...] = tokens
        hosts = [host_of(token) for token in tokens]
        zones = tuple(zones) or tuple(hosts)
        datacenters = tuple(datacenters) or (DEFAULT_DATACENTER,) * len(nodes)
        if not len(zones) == len(datacenters) == len(nodes):
            raise ValueError("every node needs a zone and a datacenter")
        self._zones = dict(zip(self.nodes, zones, strict=True))
        self._datacenters = dict(zip(self.nodes, datacenters, strict=True))
        names = sorted(set(datacenters))
        self.home = home if home in names else names[0]
        names.remove(self.home)
        self.datacenters: tuple[str, ...] = (self.home, *names)  # the order keys' owners are listed in
        members = {name: datacenters.count(name) for name in self.datacenters}
        if isinstance(replication, int):
            if replication < 0:
                raise ValueError(f"a replication factor is at least 1, got {replication}")
            wanted = dict.fromkeys(self.datacenters, replication or len(nodes))  # 0: every node
        else:
            wanted = {name: replication.get(name, 0) for name in self.datacenters}
        # The owners of every key in each datacenter: its N, or every member there while it has fewer.
        self.owners_by_datacenter: tuple[tuple[str, int], ...] = tuple(
            (name, min(wanted[name], members[name])) for name in self.datacenters
        )
        if isinstance(replication, Mapping) and not any(n for _, n in self.owners_by_datacenter):
            raise ValueError("a placement needs an owner for every key")
        self.replication = sum(n for _, n in self.owners_by_datacenter)  # a key's owners in all
        self.hosts = len(set(hosts))
        # Each node's token keys its hash (blake2b keys are at most 64 bytes, so it is digested first);
        # scoring copies a pre-keyed hasher, which costs a third of keying a new one per key.
        self._hashers = [
            hashlib.blake2b(digest_size=8, key=hashlib.blake2b(token.encode()).digest()[:32])
            for token in tokens
        ]
        # Each node's (zone, host), only in the datacenters where they can change the plain order.
        domains = dict(zip(self.nodes, zip(zones, hosts, strict=True), strict=True))
        self._domains: dict[str, tuple[str, str]] = {}
        for name in self.datacenters:
            here = [url for url in self.nodes if self._datacenters[url] == name]
            if _tiered([domains[url] for url in here]):
                self._domains.update((url, domains[url]) for url in here)
        self._orders: dict[bytes, list[str]] = {}

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def layout(self) -> tuple[str, ...]:
        """What every key's order depends on, as lines of text: two placements with the same layout place
        every key alike. The nodes, their tokens and N; and where there is more than that (a zone other
        than a node's host, a datacenter other than DEFAULT_DATACENTER), each node's zone and datacenter,
        each datacenter's owners and the home."""
        lines = (*self.nodes, *self.tokens, str(self.replication))
        zones = tuple(self._zones.values())
        datacenters = tuple(self._datacenters.values())
        if zones == tuple(host_of(token) for token in self.tokens) and self.datacenters == (
            DEFAULT_DATACENTER,
        ):
            return lines
        owners = (f"{name}:{n}" for name, n in self.owners_by_datacenter)
        return (*lines, *zones, *datacenters, *owners, self.home)

    def zone_of(self, url: str) -> str:
        return self._zones[url]

    def datacenter_of(self, url: str) -> str:
        return self._datacenters[url]

    def order(self, key: bytes) -> list[str]:
        """All nodes, most preferred replica first: the owners datacenter by datacenter (``home`` first),
        then the others the same way; in each datacenter, each zone's best first (highest score; equal
        scores by URL), then each host's best of the others, then the others by score.

        >>> machines = Placement(["http://10.0.0.1:81", "http://10.0.0.1:82", "http://10.0.0.2:81"])
        >>> len({host_of(url) for url in machines.replicas_for(b"user:42", 2)})
        2
        """
        scored = []
        for hasher, url in zip(self._hashers, self.nodes, strict=True):
            score = hasher.copy()
            score.update(key)
            scored.append((score.digest(), url))
        scored.sort(reverse=True)
        if len(self.datacenters) == 1:
            return self._by_domains([url for _, url in scored])
        owners: list[str] = []
        others: list[str] = []
        for name, n in self.owners_by_datacenter:
            ordered = self._by_domains([url for _, url in scored if self._datacenters[url] == name])
            owners += ordered[:n]
            others += ordered[n:]
        return owners + others

    def _by_domains(self, scored: list[str]) -> list[str]:
        """One datacenter's nodes, by score: each zone's best, then each host's best of the others, then
        the rest."""
        domains = self._domains
        if not domains or scored[0] not in domains:
            return scored
        zoned: list[str] = []
        hosted: list[str] = []
        rest: list[str] = []
        zones_seen: set[str] = set()
        hosts_seen: set[str] = set()
        for url in scored:
            zone, host = domains[url]
            if zone not in zones_seen:
                zoned.append(url)
            elif host not in hosts_seen:
                hosted.append(url)
            else:
                rest.append(url)
            zones_seen.add(zone)
            hosts_seen.add(host)
        return zoned + hosted + rest

    def replicas_for(self, key: bytes, n: int) -> list[str]:
        if not 1 <= n <= len(self.nodes):
            raise ValueError(f"n must be between 1 and {len(self.nodes)}, got {n}")
        order = self._orders.get(key)
        if order is None:
            order = self.order(key)
            if len(key) <= _CACHED_KEY_BYTES:
                if len(self._orders) >= _CACHED_KEYS:
                    self._orders.clear()
                self._orders[key] = order
        return order[:n]

    def owners(self, key: bytes, copies: int = 0) -> list[str]:
        """The nodes that hold a version written to ``copies`` replicas (a record's count, 0: the
        replication factor's N), most preferred first.

        >>> machines = [f"http://127.0.0.{host}:{port}" for host in (1, 2, 3) for port in (81, 82)]
        >>> six = Placement(machines, replication=3)
        >>> owners = six.owners(b"user:42")
        >>> len(owners), len({host_of(url) for url in owners}), six.owners(b"user:42", copies=2) == owners[:2]
        (3, 3, True)
        """
        return self.replicas_for(key, min(copies, self.replication) if copies else self.replication)

    @property
    def everyone_owns(self) -> bool:
        """Whether every node owns every key (N is the member count, or more)."""
        return self.replication == len(self.nodes)


def _tiered(domains: list[tuple[str, str]]) -> bool:
    """Whether nodes in these (zone, host)s are ordered otherwise than by score alone: not when each has a
    zone of its own, nor when all share one zone and each has a host of its own or all share one."""
    zones = len({zone for zone, _ in domains})
    hosts = len({host for _, host in domains})
    return zones < len(domains) and not (zones == 1 and hosts in (1, len(domains)))


def replicas_for(key: bytes, nodes: Sequence[str], n: int) -> list[str]:
    """One-off form of :meth:`Placement.replicas_for`; a node keeps a :class:`Placement` instead."""
    return Placement(nodes).replicas_for(key, n)
