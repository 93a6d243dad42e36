"""An HTTP server in a thread of the test process that answers each path with a canned answer and keeps
the requests it was sent: the counterpart of the admin tool's synchronous requests (kvnode.ops.node_http,
kvnode.ops.node_streams, kvnode.ops.backup) without a node."""

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Answer:
    """``length``: the Content-Length said, when it is not the body's (a stream that breaks off); a status
    of 0: the connection closed without an answer."""

    status: int
    body: bytes = b""
    length: int | None = None


@dataclass(frozen=True)
class Sent:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class CannedServer:
    url: str
    requests: list[Sent] = field(default_factory=list)


_NOT_FOUND = Answer(404, b"no such path\n")


@contextmanager
def canned_server(
    answers: Mapping[str, Answer] | Callable[[str], Answer], tls: ssl.SSLContext | None = None
) -> Iterator[CannedServer]:
    """A server at ``url`` answering each path of ``answers`` (any method) with its answer, any other 404;
    or answering each path with what ``answers(path)`` says. With ``tls`` (a server context), over HTTPS."""
    requests: list[Sent] = []
    answer_to = answers if callable(answers) else lambda path: answers.get(path, _NOT_FOUND)

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            requests.append(Sent(self.command, self.path, dict(self.headers.items()), body))
            answer = answer_to(self.path)
            self.close_connection = True
            if not answer.status:
                return
            self.send_response(answer.status)
            length = len(answer.body) if answer.length is None else answer.length
            self.send_header("Content-Length", str(length))
            self.end_headers()
            self.wfile.write(answer.body)

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    # Polled often, so that shutdown() at the end does not wait the default half second.
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        scheme = "http" if tls is None else "https"
        yield CannedServer(f"{scheme}://127.0.0.1:{server.server_address[1]}", requests)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
