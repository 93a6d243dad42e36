"""Filling a cluster with keys, so that a load run's GETs read a filled store: the one filler behind
``python -m loadtest fill``, ``compare``, the Locust UI and the wrk benchmark (``make bench``).

Every key of a workload is PUT once (its value size, ack and from), ``concurrency`` at a time, the nodes
taken in turn. A PUT that failed (a 504 while a replica channel reconnects, say) is sent again in a
later pass: PUTs are idempotent upserts.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import Counter
from collections.abc import Callable, Sequence

import aiohttp

from loadtest.workload import ENTITY_PATH, Workload

__all__ = ["PASSES", "describe_failures", "fill"]

PASSES = 4  # the first pass over the keys, then passes over those that failed
REQUEST_TIMEOUT = 10.0  # seconds for one PUT
_PAUSE = 1.0  # seconds between passes: time for a dropped replica channel to reconnect
_FAILURES = {"timeout": "timed out", "connection": "could not connect", "client-error": "failed here"}


async def fill(
    urls: Sequence[str],
    workload: Workload,
    concurrency: int = 32,
    *,
    passes: int = PASSES,
    say: Callable[[str], None] | None = None,
    tls: ssl.SSLContext | None = None,
) -> tuple[int, Counter[str]]:
    """PUT keys 0..keys-1 of ``workload`` (closed loop: a fill wants throughput, not a schedule).

    Keys whose PUT failed are tried again, up to ``passes`` passes in all; a pass that writes no key at
    all ends it early (the cluster is refusing, not flaking). ``say`` hears about each pass that had
    failures. ``tls`` verifies https:// nodes. Returns (keys written, the failures of the keys that never
    took, by status).
    """
    put = Workload(
        "put", workload.keys, workload.value_size, workload.ack, workload.from_, token=workload.token
    )
    todo: Sequence[int] = range(workload.keys)
    written = 0
    failed: dict[int, str] = {}
    connector = aiohttp.TCPConnector(limit=concurrency, ssl=tls if tls is not None else True)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=put.headers()) as session:
        for number in range(1, passes + 1):
            failed = await _put_each(session, urls, put, todo, concurrency)
            written += len(todo) - len(failed)
            if not failed or len(failed) == len(todo) or number == passes:
                break
            if say is not None:
                example = next(iter(failed.values()))
                say(f"fill pass {number}: {len(failed)} PUTs failed (e.g. {example}); trying them again")
            todo = sorted(failed)
            await asyncio.sleep(_PAUSE)
    return written, Counter(failed.values())


async def _put_each(
    session: aiohttp.ClientSession,
    urls: Sequence[str],
    put: Workload,
    indexes: Sequence[int],
    concurrency: int,
) -> dict[int, str]:
    """PUT each key once, key i to node i mod len(urls); the keys that did not get a 201, with why."""
    pending = iter(indexes)
    failed: dict[int, str] = {}

    async def worker() -> None:
        for index in pending:  # shared: each index is taken by exactly one worker
            request = put.request(put.key(index))
            url = urls[index % len(urls)] + ENTITY_PATH
            try:
                async with session.put(url, params=request.params, data=request.body) as response:
                    await response.read()
                    if response.status != 201:
                        failed[index] = str(response.status)
            except TimeoutError:
                failed[index] = "timeout"
            except aiohttp.ClientConnectionError:
                failed[index] = "connection"
            except aiohttp.ClientError:
                failed[index] = "client-error"

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return failed


def describe_failures(failures: Counter[str]) -> str:
    """The PUTs that never took, in words, most common first.

    >>> describe_failures(Counter({"504": 3, "connection": 1}))
    '4 PUTs never took: 3 answered 504, 1 could not connect'
    """
    reasons = ", ".join(
        f"{count} {_FAILURES.get(reason, f'answered {reason}')}" for reason, count in failures.most_common()
    )
    return f"{failures.total()} PUTs never took: {reasons}"
