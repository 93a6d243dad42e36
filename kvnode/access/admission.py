"""Admission control: how many client entity requests, and how many bytes of their bodies, are in
progress, and shedding beyond either limit.

Beyond ``--max-inflight`` /v0/entity requests in progress, or when a request's body would take the bytes
in progress beyond ``--max-inflight-bytes``, a new one is answered 503 with Retry-After at once, before
its body is read, so a shed request writes nothing (Cassandra's native-transport limits, on requests and
on bytes, are the model). A body's size is its Content-Length; a chunked body has none until it has
arrived, so it counts as the largest body allowed (``--max-body-bytes``). A request is admitted whatever
its size when nothing else is in progress, so a limit below one body cannot starve it. A node whose event
loop is starved (kvnode.loop_lag.Starvation: it has stayed far behind for a while) while clients queue
(``STARVED_QUEUE`` requests in progress) sheds every new one too, before it is so late that its peers take
it for dead: only client entity requests pass here, never a peer's replica calls or heartbeats
(docs/overload.md). A loop behind with few requests in progress (one large body, a machine short of CPU)
is not overloaded by clients, and shedding them would not help it. The counts are
plain integers that the entity handlers' one wrapper (kvnode.node.client_api) moves: no task or middleware per
request. ``kvnode_inflight_requests`` and ``kvnode_inflight_body_bytes`` read them. The bytes of every
body admitted are noted for kvnode.memory's settler, which gives memory back after them.
"""

from __future__ import annotations

import collections

from aiohttp import web

from kvnode.figures import Figure, Figures, Kind
from kvnode.loop_lag import Starvation
from kvnode.memory import Settler

__all__ = ["REQUEST_FIGURES", "STARVED_QUEUE", "Admission", "default_max_inflight_bytes"]

STARVED_QUEUE = 32  # requests in progress from which a starved loop sheds new ones
SHED_REASONS = ("requests", "bytes", "starved")  # why a request was shed: each counted from 0
_BODIES = 4  # the default bound on bodies in progress: this many of the largest body allowed,
_MIN_BYTES = 64 * 1024 * 1024  # and at least this much, so that a small body limit admits many at once


def default_max_inflight_bytes(max_body_bytes: int) -> int:
    """A fixed figure: four of the largest bodies allowed, and at least 64 MiB (64 MiB with the default
    ``--max-body-bytes``). About what the peers take in flight at once (kvnode.replica.peer: room for
    four of the largest calls), so a burst beyond it is answered 503 before its bodies are read instead
    of being read, then failing at the peers and becoming hints. Not a share of the memory: each body in
    progress costs a few times its size, and a burst the memory allowed held over a GiB (docs/limits.md).

    >>> default_max_inflight_bytes(16 * 1024 * 1024) >> 20, default_max_inflight_bytes(1024 * 1024) >> 20
    (64, 64)
    >>> default_max_inflight_bytes(100 * 1024 * 1024) >> 20
    400
    """
    return max(_MIN_BYTES, _BODIES * max_body_bytes)


# An Admission's figures (kvnode.figures).
REQUEST_FIGURES = Figures("requests", (
    Figure("inflight", Kind.GAUGE, "Client entity requests between arrival and answer",
           "kvnode_inflight_requests"),
    Figure("shed_by", Kind.COUNTER, "Client entity requests answered 503 at once, by why: requests or bytes "
           "in progress beyond their limits, or an event loop starved (behind for a while)",
           "kvnode_requests_shed", key="shed", by="reason"),
    Figure("starved", Kind.GAUGE, "1 while the event loop is starved: new client entity requests are shed",
           "kvnode_starved"),
    Figure("inflight_bytes", Kind.GAUGE, "Bytes of the bodies of client entity requests between arrival and "
           "answer", "kvnode_inflight_body_bytes"),
))  # fmt: skip


class Admission:
    def __init__(
        self,
        limit: int,
        max_bytes: int,
        max_body_bytes: int,
        settler: Settler,
        starvation: Starvation | None = None,
    ) -> None:
        self.limit = limit
        self.max_bytes = max_bytes
        self._max_body_bytes = max_body_bytes
        self._settler = settler
        self._starvation = starvation if starvation is not None else Starvation()
        self.inflight = 0  # requests between arrival and answer
        self.inflight_bytes = 0  # their bodies' sizes
        # Requests answered 503, by why: "requests" or "bytes" in progress, or a "starved" loop.
        self.shed_by = collections.Counter(dict.fromkeys(SHED_REASONS, 0))

    @property
    def starved(self) -> bool:
        """Whether the loop is starved now (kvnode.loop_lag.Starvation): new requests may be shed."""
        return self._starvation.shedding

    def admit(self, request: web.BaseRequest) -> int | web.Response:
        """The request counted in progress, and its body's size, which ``leave`` takes when it is answered;
        or the 503 to answer at once, beyond a limit."""
        size = self._body_size(request)
        if self.inflight >= self.limit:
            return self._shed("requests", f"{self.inflight} requests in progress")
        if size and self.inflight_bytes and self.inflight_bytes + size > self.max_bytes:
            return self._shed("bytes", f"{self.inflight_bytes} bytes of request bodies in progress")
        if self._starvation.shedding and self.inflight >= STARVED_QUEUE:
            return self._shed("starved", f"event loop {self._starvation.last_s * 1000:.0f} ms behind")
        self.inflight += 1
        self.inflight_bytes += size
        return size

    def leave(self, size: int) -> None:
        """An admitted request, with a body of ``size`` bytes, is answered."""
        self.inflight -= 1
        self.inflight_bytes -= size
        self._settler.passed(size)

    def _body_size(self, request: web.BaseRequest) -> int:
        length = request.content_length
        if length is not None:
            return min(length, self._max_body_bytes)  # a larger one is refused (413) unread
        return self._max_body_bytes if request.body_exists else 0

    def _shed(self, reason: str, why: str) -> web.Response:
        self.shed_by[reason] += 1
        return web.Response(status=503, text=f"overloaded: {why}; retry\n", headers={"Retry-After": "1"})
