"""The list-append check of conditional writes on real nodes (Elle's workload, checked simply): clients
append unique tokens to a few keys, each append a serial read then a conditional write of the list with
the token added (``If-Match`` the version read, ``If-None-Match: *`` on an absent key), retried while its
condition fails or its outcome is unknown (a ``504``: the next serial read shows whether it took effect).

Then every key is read serially and checked: every acknowledged append is in its list exactly once, no
token is there twice, each client's tokens are in the order it appended them, and nothing is there that
no client appended. Lost, duplicated and reordered appends are named.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tests.harness import Response, request

Send = Callable[[str, str, dict[str, str], bytes | None, dict[str, str]], Response]


def http_send(
    url: str, method: str, params: dict[str, str], body: bytes | None, headers: dict[str, str]
) -> Response:
    return request(url, method, "/v0/entity", params, body, 5.0, headers)


@dataclass
class Appends:
    """What the clients did: the tokens acknowledged, those whose outcome stayed unknown, by key."""

    acknowledged: dict[str, list[str]] = field(default_factory=dict)  # key -> tokens, in ack order
    unknown: set[str] = field(default_factory=set)
    attempts: int = 0
    outcomes: dict[int, int] = field(default_factory=dict)  # HTTP status (0: no answer) -> count
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, status: int) -> None:
        with self.lock:
            self.attempts += 1
            self.outcomes[status] = self.outcomes.get(status, 0) + 1


def read_list(send: Send, url: str, key: str) -> tuple[list[str], str | None] | None:
    """The key's tokens and ETag by a serial read; None when the read has no answer."""
    answer = send(url, "GET", {"id": key, "serial": "1"}, None, {})
    if answer.status == 404:
        return [], None
    if answer.status != 200:
        return None
    tokens = answer.body.decode().split(",") if answer.body else []
    return tokens, answer.headers.get("etag")


def run_clients(
    urls: Sequence[str],
    keys: Sequence[str],
    clients: int,
    per_client: int,
    seconds: float,
    send: Send = http_send,
) -> Appends:
    """``clients`` clients, each appending ``per_client`` tokens (``c<client>.<n>``) in turn to the keys,
    each through the next node of ``urls``, until done or ``seconds`` pass."""
    appends = Appends({key: [] for key in keys})
    deadline = time.monotonic() + seconds

    def client(number: int) -> None:
        first = number % len(urls)
        nodes = itertools.cycle([*urls[first:], *urls[:first]])
        for n in range(per_client):
            token, key = f"c{number}.{n}", keys[(number + n) % len(keys)]
            if not _append(send, nodes, appends, key, token, deadline):
                return

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    return appends


def _append(
    send: Send, nodes: itertools.cycle[str], appends: Appends, key: str, token: str, deadline: float
) -> bool:
    """Append ``token`` to ``key`` until acknowledged (True), or the deadline passes (False: its outcome
    stays unknown if an attempt's was)."""
    uncertain = False
    while time.monotonic() < deadline:
        url = next(nodes)
        try:
            read = read_list(send, url, key)
        except OSError:
            read = None
        if read is None:
            continue
        tokens, etag = read
        if token in tokens:  # an earlier attempt whose outcome was unknown took effect
            break
        condition = {"If-Match": etag} if etag else {"If-None-Match": "*"}
        try:
            answer = send(url, "PUT", {"id": key}, ",".join([*tokens, token]).encode(), condition)
            status = answer.status
        except OSError:
            status = 0
        appends.count(status)
        if status == 201:
            break
        uncertain = uncertain or status not in (412, 503)
    else:
        if uncertain:
            with appends.lock:
                appends.unknown.add(token)
        return False
    with appends.lock:
        appends.acknowledged[key].append(token)
        appends.unknown.discard(token)
    return True


def final_lists(
    send: Send, urls: Sequence[str], keys: Sequence[str], seconds: float = 30.0
) -> dict[str, list[str]]:
    """Each key's list by a serial read, tried through each node in turn until one answers."""
    lists: dict[str, list[str]] = {}
    deadline = time.monotonic() + seconds
    for key in keys:
        for url in itertools.cycle(urls):
            if time.monotonic() > deadline:
                raise AssertionError(f"no serial read of {key} answered within {seconds} s")
            try:
                read = read_list(send, url, key)
            except OSError:
                continue
            if read is not None:
                lists[key] = read[0]
                break
    return lists


def problems(appends: Appends, lists: dict[str, list[str]]) -> list[str]:
    """What the lists break of the check (nothing: valid)."""
    found: list[str] = []
    for key, tokens in lists.items():
        seen: set[str] = set()
        for token in tokens:
            if token in seen:
                found.append(f"{key}: {token} appended twice")
            seen.add(token)
        for token in appends.acknowledged[key]:
            if token not in seen:
                found.append(f"{key}: acknowledged {token} lost")
        order: dict[str, int] = {}
        for token in tokens:
            client, _, number = token.partition(".")
            if not client.startswith("c") or not number.isdigit():
                found.append(f"{key}: {token!r} was never appended")
                continue
            if order.get(client, -1) > int(number):
                found.append(f"{key}: {token} after a later append of {client}")
            order[client] = max(order.get(client, -1), int(number))
    return found
