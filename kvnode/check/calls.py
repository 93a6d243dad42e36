"""One request of the check to one node, exactly once, and what it means for the history: what the client saw
is what is recorded, so nothing here retries (kvnode.client would; aiohttp's own resending of a request on a
dropped keep-alive connection is turned off too).

A read that answered 200 or 404 is ``ok``; any other read is ``fail`` (it saw nothing and changed nothing).
A write answered 201 or 202 is ``ok``; one surely not applied is ``fail``: a 4xx (the request was refused
before anything was written; a 412 is a condition found false), a 503 (shed, or a fenced coordinator, before
any work), a connection that could not be opened. Anything else may have been applied: ``info`` (a 504, a
500, a 507, whose replicas other than the full one may have taken it, a timeout, a connection dropped after
the request was sent).

>>> write_outcome(Reply("http://n1", 504, b"1 of 3 replicas answered", "", ""))
('info', '504 1 of 3 replicas answered')
>>> write_outcome(Reply("http://n1", None, b"", "", "cannot connect: refused", sent=False))
('fail', 'cannot connect: refused')
>>> read_outcome(Reply("http://n1", 404, b"", "", ""))
('ok', '')
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

import aiohttp

__all__ = ["Caller", "Reply", "read_outcome", "write_outcome"]

ENTITY = "/v0/entity"
Outcome = Literal["ok", "fail", "info"]


@dataclass(frozen=True, slots=True)
class Reply:
    """A node's answer (``status``), or none (``status`` None, ``error`` saying why; ``sent``: the request
    may have reached the node)."""

    node: str
    status: int | None
    body: bytes
    etag: str
    error: str
    sent: bool = True

    def reason(self) -> str:
        """The status and the node's one line, or the error."""
        if self.status is None:
            return self.error
        said = self.body.decode("utf-8", "replace").strip().splitlines()
        return f"{self.status} {said[0]}" if said else str(self.status)


def read_outcome(reply: Reply) -> tuple[Outcome, str]:
    if reply.status in (200, 404):
        return "ok", ""
    return "fail", reply.reason()


def write_outcome(reply: Reply) -> tuple[Outcome, str]:
    if reply.status in (201, 202):
        return "ok", ""
    if reply.status is None:
        return ("info" if reply.sent else "fail"), reply.error
    if 400 <= reply.status < 500 or reply.status == 503:
        return "fail", reply.reason()
    return "info", reply.reason()


class Caller:
    """The check's HTTP client: one connection pool, ``token`` and ``ssl`` as the nodes need them, each
    request bounded by ``timeout`` seconds."""

    def __init__(
        self, token: str | None = None, ssl_context: ssl.SSLContext | None = None, timeout: float = 5.0
    ):
        self._headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        self._ssl = ssl_context
        self._timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=min(timeout, 2.0))
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Caller:
        self._session = aiohttp.ClientSession(
            timeout=self._timeout,
            headers=self._headers,
            connector=aiohttp.TCPConnector(ssl=True if self._ssl is None else self._ssl, limit=0),
        )
        # A write resent after its connection dropped could be applied twice, unrecorded (as kvnode.client).
        self._session._retry_connection = False
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._session is not None:
            await self._session.close()

    async def entity(
        self,
        node: str,
        method: str,
        key: str,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> Reply:
        """One request to ``node``'s /v0/entity for ``key``."""
        assert self._session is not None, "use the caller in `async with`"
        query = {"id": key, **(params or {})}
        try:
            async with self._session.request(
                method, node + ENTITY, params=query, headers=headers, data=body
            ) as response:
                return Reply(
                    node, response.status, await response.read(), response.headers.get("ETag", ""), ""
                )
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as error:
            return Reply(node, None, b"", "", f"cannot connect: {type(error).__name__}", sent=False)
        except TimeoutError:
            return Reply(node, None, b"", "", "timeout")
        except aiohttp.ClientError as error:
            return Reply(node, None, b"", "", f"no answer: {type(error).__name__}")
