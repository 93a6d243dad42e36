"""Locust user for kvnode: one class, KvUser, whose workload is chosen with ``--kv-workload``.

    locust -f loadtest/locustfile.py --host http://127.0.0.1:8080                 # web UI on :8089
    locust -f loadtest/locustfile.py --headless -u 20 -r 5 -t 30s --host URL --kv-workload get

Workloads (the UI's form shows them as a drop-down, ``read-mostly`` selected, under "Custom
parameters": Locust's web UI puts every option a locustfile adds there, folded, and offers no way to
show one elsewhere; ``python -m loadtest ui`` says so when it starts):

    read-mostly  90% GET, 10% PUT, over the filled keys: a 404 is a failure, and no key is deleted
    get          GET only (a 404 is a failure)
    put          PUT only
    delete       DELETE only: the keys it deletes answer 404 to a later get or read-mostly run
    mixed        70% GET, 25% PUT, 5% DELETE; a GET of a key it deleted (404) is not a failure
    cas          a GET of a key's value and ETag, then its conditional PUT (If-Match, or If-None-Match: *
                 where the GET found none), shown by outcome: "PUT /v0/entity (cas applied)", "(cas
                 not_applied)" (412: another write came between; not a failure), "(cas unknown)" (504: a
                 failure)

One class with a choice, not one class per workload: Locust's class picker selects every class in the
form when the UI starts, so the UI started with deletes running next to reads of the deleted keys.

Other options (flags, ``LOCUST_KV_*`` environment variables, or the UI's form): ``--kv-keys``,
``--kv-value-size``, ``--kv-ack`` (a number, or a consistency level by name: ``--kv-ack local_quorum``),
``--kv-from``, ``--kv-token-file`` (``LOCUST_KV_TOKEN_FILE``: a file
whose first line is the client token, for a node started with ``--auth-tokens-file``). Reads expect a
filled store: run ``python -m loadtest fill --url URL --keys N`` first with the same N. Locust users wait
for each answer (closed loop), so under a stall they slow down and Locust's latencies understate it: use
``python -m loadtest rate`` for latency figures.
"""

from __future__ import annotations

import random
import urllib.parse
from typing import Any

import gevent  # type: ignore[import-untyped]  # no stubs; Locust runs on it
import locust.stats
from locust import FastHttpUser, constant, events, task
from locust.env import Environment

from kvnode.ops.argtypes import ack, token_file
from loadtest.workload import (
    CAS_OUTCOMES,
    CAS_READ_STATUSES,
    CAS_WRITE,
    ENTITY_PATH,
    Op,
    Workload,
    accepted_statuses,
    cas_condition,
)

__all__ = ["DEFAULT_WORKLOAD", "WORKLOADS", "KvUser"]

# Workload name -> (operation, weight) pairs; "mixed" is loadtest.workload's own mix.
WORKLOADS: dict[str, tuple[tuple[Op, int], ...]] = {
    "read-mostly": (("get", 9), ("put", 1)),
    "get": (("get", 1),),
    "put": (("put", 1),),
    "delete": (("delete", 1),),
    "mixed": (("mixed", 1),),
    "cas": (("cas", 1),),
}
DEFAULT_WORKLOAD = "read-mostly"


def _add_options(parser: Any) -> None:
    options: dict[str, dict[str, Any]] = {
        "workload": {
            "choices": list(WORKLOADS),
            "default": DEFAULT_WORKLOAD,
            "help": "read-mostly (9 GETs to 1 PUT of the filled keys), get, put, delete, mixed (deletes "
            "too), cas (a GET, then a conditional PUT over the version read)",
        },
        "keys": {"type": int, "default": 10_000, "help": "key space: keys 0 .. N-1"},
        "value-size": {"type": int, "default": 100, "help": "bytes per PUT value"},
        "ack": {
            "default": "",
            "help": "replicas that must answer, or a consistency level by name: one, quorum, local_quorum, "
            "each_quorum, all (empty: node default)",
        },
        "from": {"type": int, "default": 0, "help": "replicas asked (0: node default)"},
        "token-file": {"default": "", "help": "file whose first line is the client token (none: no token)"},
    }
    for name, settings in options.items():
        env_var = "LOCUST_KV_" + name.upper().replace("-", "_")
        parser.add_argument(f"--kv-{name}", env_var=env_var, **settings)


def _final_csv_write(environment: Environment, **kwargs: Any) -> None:
    """Locust rewrites its CSV files once a second, not at exit, so they can miss the last second of a
    run (locust#1806, #2299): on quitting, wait until its writer has run once more."""
    if environment.parsed_options is not None and environment.parsed_options.csv_prefix:
        gevent.sleep(locust.stats.CSV_STATS_INTERVAL_SEC + 0.5)


events.init_command_line_parser.add_listener(_add_options)  # type: ignore[no-untyped-call]
events.quitting.add_listener(_final_csv_write)  # type: ignore[no-untyped-call]


class KvUser(FastHttpUser):
    """Sends the chosen workload's requests back to back, each on a random key of the key space."""

    wait_time = constant(0)

    def on_start(self) -> None:
        options = self.environment.parsed_options
        seed = random.randrange(2**32)  # each user its own key sequence
        self.rng = random.Random(seed)
        mix = WORKLOADS[options.kv_workload]
        token = token_file(options.kv_token_file) if options.kv_token_file else ""
        self.workloads = [
            Workload(
                op,
                keys=options.kv_keys,
                value_size=options.kv_value_size,
                ack=ack(options.kv_ack) if options.kv_ack not in ("", "0") else None,
                from_=options.kv_from or None,
                seed=seed + index,
                token=token,
            )
            for index, (op, _) in enumerate(mix)
        ]
        self.weights = [weight for _, weight in mix]

    @task
    def send(self) -> None:
        workload = self.rng.choices(self.workloads, self.weights)[0]
        request = workload.next_request()
        path = ENTITY_PATH + "?" + urllib.parse.urlencode(request.params)
        if workload.op == "cas":
            self._cas(workload, path)
            return
        with self.client.request(
            request.method,
            path,
            data=request.body,  # type: ignore[arg-type]  # its hint omits bytes, which it sends as is
            headers=workload.headers(),
            name=ENTITY_PATH,  # Locust shows the method beside it: "GET /v0/entity", not "GET GET ..."
            catch_response=True,
        ) as response:
            if request.is_error(response.status_code, workload.op == "mixed"):
                response.failure(f"status {response.status_code}")
            else:
                response.success()

    def _cas(self, workload: Workload, path: str) -> None:
        """A cas op: the GET (a 404 is a key without a live value, not a failure), then its conditional PUT,
        reported under its outcome's name."""
        with self.client.request(
            "GET", path, headers=workload.headers(), name=ENTITY_PATH, catch_response=True
        ) as read:
            if read.status_code not in CAS_READ_STATUSES:
                read.failure(f"status {read.status_code}")
                return
            read.success()
            etag = (read.headers.get("ETag") or "").encode() if read.status_code == 200 else b""
        with self.client.request(
            "PUT",
            path,
            data=workload.value,  # type: ignore[arg-type]  # as in send
            headers={**workload.headers(), **cas_condition(etag)},
            name=ENTITY_PATH,
            catch_response=True,
        ) as write:
            status = str(write.status_code)
            write.request_meta["name"] = f"{ENTITY_PATH} (cas {CAS_OUTCOMES.get(status, status)})"
            if write.status_code in accepted_statuses(CAS_WRITE, mixed=False):
                write.success()
            else:
                write.failure(f"status {status}")
