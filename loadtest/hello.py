"""The benchmark's reference point: an aiohttp hello-world on uvloop, served the way kvnode serves.

``python -m loadtest.hello --port P`` answers GET and PUT on ``/`` with a tiny body and nothing else.
It uses the same server stack as a kvnode node (AppRunner, a site on a port bound first, backlog 1024,
no access log, uvloop, the same garbage-collector settings), so the gap between the two is kvnode's own
work: parsing, placement, replica calls, LevelDB.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import uvloop
from aiohttp import web

from kvnode.access.listening import CannotListen, bind
from kvnode.node.serving import serve_until_signal

__all__ = ["create_app", "main"]


async def hello(request: web.Request) -> web.Response:
    # A PUT's body is read, as kvnode reads it, so the PUT reference includes receiving the value.
    await request.read()
    return web.Response(text="hello\n")


def create_app() -> web.Application:
    app = web.Application()
    app.router.add_get("/", hello, allow_head=False)
    app.router.add_put("/", hello)
    app.router.add_get("/v0/status", hello, allow_head=False)  # so kvnode's readiness check works here too
    return app


async def serve(host: str, port: int) -> int:
    try:
        bound = bind(host, port, tls=False)
    except CannotListen as error:
        print(f"hello-world: {error}", file=sys.stderr)
        return 2
    try:
        runner = web.AppRunner(create_app(), handle_signals=False, access_log=None)
        await runner.setup()
        return await serve_until_signal(runner, [bound], "(hello-world)")
    except CannotListen as error:
        print(f"hello-world: {error}", file=sys.stderr)
        return 2
    finally:
        bound.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.hello", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, required=True, help="port to listen on")
    args = parser.parse_args(argv)
    return uvloop.run(serve(args.host, args.port))


if __name__ == "__main__":
    sys.exit(main())
