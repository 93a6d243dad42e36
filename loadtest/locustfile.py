"""Locust users for kvnode: PUT, GET, DELETE and a mixed workload over one key space.

    locust -f loadtest/locustfile.py --host http://127.0.0.1:8080                 # web UI on :8089
    locust -f loadtest/locustfile.py --headless -u 20 -r 5 -t 30s --host URL GetUser
    locust -f loadtest/locustfile.py --class-picker --host URL                   # choose users in the UI

Options (flags, ``LOCUST_KV_*`` environment variables, or the UI's form): ``--kv-keys``,
``--kv-value-size``, ``--kv-ack``, ``--kv-from``. GET expects a filled store: run
``python -m loadtest fill --url URL --keys N`` first with the same N (a 404 counts as a failure, except
in the mixed workload, which deletes keys). Locust users wait for each answer (closed loop), so under a
stall they slow down and Locust's latencies understate it: use ``python -m loadtest rate`` for figures.
"""

from __future__ import annotations

import random
import urllib.parse
from typing import Any

from locust import FastHttpUser, constant, events, task

from loadtest.workload import ENTITY_PATH, Op, Workload

__all__ = ["DeleteUser", "GetUser", "MixedUser", "PutUser"]


def _add_options(parser: Any) -> None:
    parser.add_argument("--kv-keys", type=int, default=10_000, help="key space: keys 0 .. N-1")
    parser.add_argument("--kv-value-size", type=int, default=100, help="bytes per PUT value")
    parser.add_argument("--kv-ack", type=int, default=0, help="replicas that must answer (0: node default)")
    parser.add_argument("--kv-from", type=int, default=0, help="replicas asked (0: node default)")


events.init_command_line_parser.add_listener(_add_options)  # type: ignore[no-untyped-call]


class _KvUser(FastHttpUser):
    abstract = True
    wait_time = constant(0)
    op: Op = "put"

    def on_start(self) -> None:
        options = self.environment.parsed_options
        self.workload = Workload(
            self.op,
            keys=options.kv_keys,
            value_size=options.kv_value_size,
            ack=options.kv_ack or None,
            from_=options.kv_from or None,
            seed=random.randrange(2**32),  # each user its own key sequence
        )

    @task
    def send(self) -> None:
        request = self.workload.next_request()
        path = ENTITY_PATH + "?" + urllib.parse.urlencode(request.params)
        with self.client.request(
            request.method,
            path,
            data=request.body,  # type: ignore[arg-type]  # its hint omits bytes, which it sends as is
            name=f"{request.method} {ENTITY_PATH}",
            catch_response=True,
        ) as response:
            if request.is_error(response.status_code, self.op == "mixed"):
                response.failure(f"status {response.status_code}")
            else:
                response.success()


class PutUser(_KvUser):
    op = "put"


class GetUser(_KvUser):
    op = "get"


class DeleteUser(_KvUser):
    op = "delete"


class MixedUser(_KvUser):
    op = "mixed"
