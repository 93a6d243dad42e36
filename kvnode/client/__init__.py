"""An asyncio client for a kvnode cluster: get, put and delete, each routed to an owner of its key, scan,
and conditional writes (compare-and-set on one key, docs/conditional-writes.md) with serial reads.

    async with Client("http://127.0.0.1:8080") as kv:
        await kv.put("greeting", b"hello")
        assert await kv.get("greeting") == b"hello"
        await kv.delete("greeting", ack=3)
        etag = await kv.put_if("counter", b"1", None)          # only if absent (If-None-Match: *)
        current = await kv.get_versioned("counter", serial=True)  # Versioned(value=b"1", etag=...)
        await kv.put_if("counter", b"2", current.etag)           # only over that version (If-Match)

**Routing (token-aware).** On entering, the client learns the cluster's members from ``GET /v0/cluster``
of a seed (from the open ``GET /v0/status`` when its token's role is not admin: members without their
reachability) and places keys with :class:`kvnode.topology.placement.Placement`, the rule every node uses. A
request goes to the first member in its key's placement order that the client has not found failing, so the
coordinator is a replica and its own copy answers locally. In a cluster of several datacenters, a client
made with ``datacenter=`` asks the owners in that one first (its own: ``ack="local_quorum"`` is then
answered at local latency); without it, those of the first datacenter by name. A member that refused a
connection, dropped one or did not answer in time is demoted (asked after every other member) for 5 s,
and the client refreshes its view in the background, at most once a second, demoting the members the
answering node cannot reach either. Requests share one ``aiohttp.ClientSession``, so connections are reused.

**Retries: only what is safe, at most ``attempts`` requests per call.**

- A GET is a read: after a connection failure, a timeout or a ``503`` it is sent to the next member.
- A PUT or DELETE is retried only when it surely did not reach a node: the connection could not be
  opened, or the node answered ``503`` (admission sheds before any work, so nothing was written). A
  write whose connection failed after it was sent, or that timed out, raises :class:`Unreachable` with
  ``maybe_applied`` set: it may have been applied, as after a ``504``. aiohttp's own resending of
  idempotent methods on a dropped connection is turned off for the same reason.
- A ``504`` is never retried: a write may have been applied, and a read would meet the same replicas.
- A conditional write (``put_if``, ``delete_if``) is retried like a PUT: only when it surely did not
  reach a node (a ``503``: shed, a clock fenced, or an owner that speaks an older replica protocol; a
  connection that could not be opened). A ``504`` or no answer after it was sent raises
  :class:`OutcomeUnknown`; a ``412`` raises :class:`PreconditionFailed` with the key's current version.
- A member that answered ``503`` is not asked again before its ``Retry-After`` (seconds) has passed;
  when every member left to try is resting, the call waits for the first to be ready, unless that is
  longer than ``max_retry_wait``, and then raises :class:`Overloaded`.
- A member asked again within one call (every other one failed) is asked after 0.1 s.
- A scan is a read: when no connection to its node can be opened it goes to the next member (unless
  the call named the node); a stream that fails after it started raises :class:`Unreachable`.

**Security.** ``token`` is sent as ``Authorization: Bearer TOKEN`` on every request (a node started
with ``--auth-tokens-file`` answers 401 without a valid one and 403 when its role does not allow the
request: :class:`BadRequest`, never retried). ``ssl`` is the context https:// nodes are verified with,
say ``kvnode.access.tls.verifying_context(Path("ca.pem"))``; give it a certificate too for
``--tls-client-auth``.

Errors are :class:`KvnodeError` subclasses: :class:`NotFound`, :class:`BadRequest`,
:class:`QuorumNotReached`, :class:`Overloaded`, :class:`ServerError`, :class:`Unreachable`, and for
conditional writes :class:`PreconditionFailed` and :class:`OutcomeUnknown`. When retries run out, the last
one is raised.

routing   which member to ask for a key (pure)
errors    one class per way a call fails, and the error an answer stands for
versions  a value with its ETag; the condition headers of conditional writes (pure)
chunks    a scan answer's records
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Mapping
from ssl import SSLContext
from types import TracebackType
from typing import Any

import aiohttp

from kvnode.client.chunks import records
from kvnode.client.errors import (
    Answer,
    BadRequest,
    KvnodeError,
    NotFound,
    OutcomeUnknown,
    Overloaded,
    PreconditionFailed,
    QuorumNotReached,
    ServerError,
    Unreachable,
    error_of,
)
from kvnode.client.routing import Members
from kvnode.client.versions import Versioned, condition_headers, etag_of

__all__ = [
    "BadRequest",
    "Client",
    "KvnodeError",
    "NotFound",
    "OutcomeUnknown",
    "Overloaded",
    "PreconditionFailed",
    "QuorumNotReached",
    "ServerError",
    "Unreachable",
    "Versioned",
]

_REFRESH_EVERY_S = 1.0  # at most one view refresh this often, however many requests fail
_ENTITY = "/v0/entity"
_OLDER_NODE = "the answer names no version (ETag): the node is older than conditional writes"


class Client:
    """A cluster's client: token-aware routing, bounded safe retries, one connection pool.

    ``seeds`` are nodes to learn the cluster from (the first that answers; later refreshes ask the
    members too). ``timeout`` bounds each request (for a scan: each read of its stream), ``connect_timeout``
    each connection attempt; ``attempts`` is the most requests one call sends. ``datacenter``: the
    datacenter whose members the client asks first (its own).

    A request's ``ack`` is a number (of its ``from`` first owners; the node's defaults without them) or a
    consistency level by name, which goes without ``from``: ``"one"``, ``"quorum"`` (a majority of all
    the key's owners), ``"local_quorum"`` (a majority of its owners in the coordinator's datacenter),
    ``"each_quorum"`` (a majority in every datacenter) or ``"all"``.
    """

    def __init__(
        self,
        *seeds: str,
        timeout: float = 10.0,
        connect_timeout: float = 2.0,
        attempts: int = 3,
        max_retry_wait: float = 5.0,
        token: str | None = None,
        ssl: SSLContext | None = None,
        datacenter: str = "",
    ) -> None:
        if not seeds:
            raise ValueError("a client needs at least one seed URL")
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        self.seeds = tuple(url.rstrip("/") for url in seeds)
        self.attempts = attempts
        self.max_retry_wait = max_retry_wait
        self._timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=connect_timeout)
        self._scan_timeout = aiohttp.ClientTimeout(sock_connect=connect_timeout, sock_read=timeout)
        self._headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        self._ssl = ssl
        self.datacenter = datacenter
        self._session: aiohttp.ClientSession | None = None
        self._members: Members | None = None
        self._refresh: asyncio.Task[None] | None = None
        self._refreshed_at = float("-inf")

    async def __aenter__(self) -> Client:
        self._session = aiohttp.ClientSession(
            timeout=self._timeout,
            headers=self._headers,
            connector=aiohttp.TCPConnector(ssl=True if self._ssl is None else self._ssl),
        )
        # aiohttp sends an idempotent method again, once, when its connection drops; a write that may
        # have been applied must not be, so this client decides every retry itself (see the module doc).
        self._session._retry_connection = False
        try:
            await self.refresh()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop a refresh under way and close every connection."""
        if self._refresh is not None:
            self._refresh.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresh
            self._refresh = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def members(self) -> tuple[str, ...]:
        """The cluster's members, as the last view said."""
        return self._routing().placement.nodes

    @property
    def replication_factor(self) -> int:
        """N, how many members hold each key (a request's ``from`` is at most N), as the last view said."""
        return self._routing().placement.replication

    @property
    def owners_by_datacenter(self) -> dict[str, int]:
        """How many members of each datacenter hold each key (its replication factor there, or all its
        members while it has fewer), as the last view said."""
        return dict(self._routing().placement.owners_by_datacenter)

    @property
    def zones(self) -> dict[str, str]:
        """Each member's zone, as the last view said."""
        placement = self._routing().placement
        return {url: placement.zone_of(url) for url in placement.nodes}

    @property
    def datacenters(self) -> dict[str, str]:
        """Each member's datacenter, as the last view said."""
        placement = self._routing().placement
        return {url: placement.datacenter_of(url) for url in placement.nodes}

    def route(self, key: str) -> list[str]:
        """The members a request for ``key`` would be sent to, in order (its N owners first)."""
        return self._routing().order(key)

    async def refresh(self) -> None:
        """Learn the members from ``GET /v0/cluster`` of the first node that answers (seeds first, then
        the members known), and demote those it cannot reach. :class:`Unreachable` if none answers,
        :class:`BadRequest` (401) if one needs a token this client lacks or gave wrong."""
        self._refreshed_at = time.monotonic()
        known = () if self._members is None else self._members.placement.nodes
        error = Unreachable(self.seeds[0], "no node asked")
        for url in dict.fromkeys([*self.seeds, *known]):
            try:
                answer = await self._send(url, "GET", "/v0/cluster")
                if answer.status == 403:  # a token without admin: the members, not their reachability
                    answer = await self._send(url, "GET", "/v0/status")
            except Unreachable as failure:
                error = failure
                continue
            if answer.status == 401:  # no valid token: the call is wrong on every node alike
                raise error_of(answer, "GET")
            if answer.status != 200:
                said = answer.body.decode("utf-8", "replace").strip()
                error = Unreachable(url, f"/v0/cluster answered {answer.status} {said}".rstrip())
                continue
            try:
                self._learn(json.loads(answer.body))
            except (ValueError, KeyError, TypeError) as garbage:  # not a kvnode node, or not one of ours
                error = Unreachable(url, f"/v0/cluster did not answer a cluster view: {garbage!r}")
                continue
            return
        raise error

    async def get(
        self, key: str, *, ack: int | str | None = None, from_: int | None = None, serial: bool = False
    ) -> bytes:
        """The key's value. :class:`NotFound` if it is absent or deleted. ``serial``: a serial read
        (``serial=1``), which sees every conditional write acknowledged before it (and completes one left
        half-done first); it takes no ``ack`` or ``from_``."""
        answer = await self._entity("GET", key, _read_params(ack, from_, serial))
        if answer.status != 200:
            raise error_of(answer, "GET")
        return answer.body

    async def get_versioned(
        self, key: str, *, ack: int | str | None = None, from_: int | None = None, serial: bool = False
    ) -> Versioned | None:
        """The key's value and the ETag naming its version, for a read-modify-write with :meth:`put_if`
        (None where :meth:`get` raises NotFound: the key has no live value). ``serial`` as for get."""
        answer = await self._entity("GET", key, _read_params(ack, from_, serial))
        if answer.status == 404:
            return None
        if answer.status != 200:
            raise error_of(answer, "GET")
        return Versioned(answer.body, _written_etag(answer))

    async def put(
        self,
        key: str,
        value: bytes,
        *,
        ack: int | str | None = None,
        from_: int | None = None,
        ttl_ms: int | None = None,
    ) -> None:
        """Store ``value`` under ``key`` once ``ack`` of its ``from`` replicas have it (node defaults);
        with ``ttl_ms`` it expires that many milliseconds after the write, without it it is permanent."""
        answer = await self._entity("PUT", key, _write_params(ack, from_, ttl_ms), value)
        if answer.status != 201:
            raise error_of(answer, "PUT")

    async def delete(self, key: str, *, ack: int | str | None = None, from_: int | None = None) -> None:
        """Delete ``key`` (a tombstone) once ``ack`` of its ``from`` replicas have it."""
        answer = await self._entity("DELETE", key, _write_params(ack, from_, None))
        if answer.status != 202:
            raise error_of(answer, "DELETE")

    async def put_if(self, key: str, value: bytes, etag: str | None, *, ttl_ms: int | None = None) -> str:
        """Store ``value`` only if the key's newest version is the one ``etag`` names (``If-Match``; a
        deleted key's tombstone has one too), or with ``etag`` None, only if the key has no live value
        (``If-None-Match: *``). Linearizable with the key's other conditional writes and serial reads, as
        long as the key is not also written by plain puts and deletes. Returns the ETag of the version
        written.

        Raises :class:`PreconditionFailed` when the condition did not hold (nothing was written), with the
        key's current version as a serial read made after the ``412`` found it (if that read fails, its
        error is raised instead, from the PreconditionFailed), and :class:`OutcomeUnknown` when it may or
        may not have applied (a ``504``, or no answer): resolve it with ``get_versioned(key,
        serial=True)``, it is never retried. ``ttl_ms`` as for :meth:`put`.
        """
        return await self._conditional("PUT", key, etag, _write_params(None, None, ttl_ms), value)

    async def delete_if(self, key: str, etag: str) -> str:
        """Delete ``key`` (a tombstone) only if its newest version is the one ``etag`` names; returns the
        tombstone's ETag. Raises as :meth:`put_if` does."""
        return await self._conditional("DELETE", key, etag, {})

    async def scan(
        self, start: str, end: str | None = None, *, node: str | None = None
    ) -> AsyncIterator[tuple[str, bytes]]:
        """The cluster's live records with ``start <= key < end``, in key order, as (key, value), each key
        once with its newest version (``GET /v0/scan`` of the first member the client has not found
        failing, the next one when a connection cannot be opened); with ``node``, only what that node
        holds (``/v0/entities``). A key is split from its value at the first newline. Leave the loop
        early inside ``contextlib.aclosing`` to release the connection at once.
        """
        params = {"start": start} if end is None else {"start": start, "end": end}
        members = self._routing()
        path = "/v0/entities" if node else "/v0/scan"
        candidates = [node] if node else members.demoted_last(members.placement.nodes)
        session = self._open_session()
        failure = Unreachable(candidates[0], "no node asked")
        for url in candidates[: self.attempts]:
            try:
                response = await session.get(url + path, params=params, timeout=self._scan_timeout)
            except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as error:
                failure = self._failed(url, error, sent=False)
                continue
            except (aiohttp.ClientError, TimeoutError) as error:
                raise self._failed(url, error, sent=True) from None
            async with response:
                if response.status != 200:
                    answer = Answer(url, response.status, await response.read(), response.headers)
                    raise error_of(answer, "GET")
                try:
                    async for record in records(response):
                        yield record
                except (aiohttp.ClientError, TimeoutError) as error:
                    raise self._failed(url, error, sent=True) from None
            return
        raise failure

    async def _conditional(
        self, method: str, key: str, etag: str | None, params: dict[str, str], body: bytes | None = None
    ) -> str:
        """A conditional write: the written version's ETag, or the errors put_if names."""
        headers = condition_headers(etag)
        try:
            answer = await self._entity(method, key, params, body, headers)
        except Unreachable as failure:
            if not failure.maybe_applied:
                raise
            raise OutcomeUnknown(failure.url, f"{failure.reason}: the write may yet take effect") from None
        if answer.status == (201 if method == "PUT" else 202):
            written = etag_of(answer.headers)
            if written is None:  # a node older than conditional writes ignores their headers
                raise ServerError(answer.url, _OLDER_NODE + ": it ignored the condition", answer.status)
            return written
        if answer.status == 504:
            raise OutcomeUnknown(answer.url, answer.reason)
        if answer.status != 412:
            raise error_of(answer, method)
        refused = PreconditionFailed(answer.url, answer.reason, None)
        try:
            current = await self.get_versioned(key, serial=True)
        except KvnodeError as failure:
            raise failure from refused
        raise PreconditionFailed(answer.url, refused.reason, current)

    async def _entity(
        self,
        method: str,
        key: str,
        params: dict[str, str],
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Answer:
        """The first answer that is not a 503, after the retries the module doc allows."""
        params = {"id": key, **params}
        members = self._routing()
        order = members.order(key)
        tried: list[str] = []
        last: KvnodeError | None = None
        for _ in range(self.attempts):
            url, wait = members.next_for(order, tried)
            if wait > self.max_retry_wait:
                raise last or Overloaded(url, f"answered 503 earlier; ready again in {wait:.1f} s", wait)
            if wait > 0:
                await asyncio.sleep(wait)
            tried.append(url)
            try:
                answer = await self._send(url, method, _ENTITY, params, body, headers)
            except Unreachable as failure:
                if failure.maybe_applied:
                    raise
                last = failure
                continue
            if answer.status != 503:
                return answer
            overloaded = error_of(answer, method)
            assert isinstance(overloaded, Overloaded)
            members.rest(url, overloaded.retry_after)
            last = overloaded
        assert last is not None
        raise last

    async def _send(
        self,
        url: str,
        method: str,
        path: str,
        params: Mapping[str, str] | None = None,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Answer:
        """One request; :class:`Unreachable` without an answer (``maybe_applied``: a write was sent)."""
        session = self._open_session()
        try:
            async with session.request(
                method, url + path, params=params, data=body, headers=headers
            ) as response:
                return Answer(url, response.status, await response.read(), response.headers)
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as error:
            raise self._failed(url, error, sent=False) from None
        except (aiohttp.ClientError, TimeoutError) as error:
            raise self._failed(url, error, sent=True, write=method != "GET") from None

    def _failed(self, url: str, error: BaseException, sent: bool, write: bool = False) -> Unreachable:
        """Demote a member that did not answer, refresh the view (bounded in rate), say what happened."""
        if self._members is not None:
            self._members.demote(url)
        if time.monotonic() - self._refreshed_at >= _REFRESH_EVERY_S and self._refresh is None:
            self._refresh = asyncio.get_running_loop().create_task(self._refresh_in_background())
        what = "no answer" if sent else "cannot connect"
        reason = f"{what}: {type(error).__name__}" + (f": {error}" if str(error) else "")
        return Unreachable(url, reason, maybe_applied=sent and write)

    async def _refresh_in_background(self) -> None:
        try:
            await self.refresh()
        except Unreachable:
            pass  # the view stays as it was; the next failure after _REFRESH_EVERY_S tries again
        finally:
            self._refresh = None

    def _learn(self, view: dict[str, Any]) -> None:
        """Take a ``/v0/cluster`` view (or ``/v0/status``); a bad one changes nothing."""
        self._members = Members.learnt(view, self._members, self.datacenter)

    def _routing(self) -> Members:
        if self._members is None:
            raise RuntimeError("use the client in `async with Client(...) as client:`")
        return self._members

    def _open_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("use the client in `async with Client(...) as client:`")
        return self._session


def _read_params(ack: int | str | None, from_: int | None, serial: bool) -> dict[str, str]:
    params = _write_params(ack, from_, None)
    if serial:
        params["serial"] = "1"
    return params


def _write_params(ack: int | str | None, from_: int | None, ttl_ms: int | None) -> dict[str, str]:
    return {
        name: str(value)
        for name, value in (("ack", ack), ("from", from_), ("ttl", ttl_ms))
        if value is not None
    }


def _written_etag(answer: Answer) -> str:
    """The ETag of the version a GET's answer names."""
    etag = etag_of(answer.headers)
    if etag is None:
        raise ServerError(answer.url, _OLDER_NODE, answer.status)
    return etag
