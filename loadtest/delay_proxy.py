"""A TCP proxy that delays every chunk the server sends back by a fixed time: a slow replica on demand.

    python -m loadtest.delay_proxy --listen 127.0.0.1:9001 --target 127.0.0.1:9000 --delay-ms 20

Bytes towards the server pass at once; bytes from the server leave ``delay`` after they arrived, in
order, so every answer is late by the delay while throughput is not limited (a latency, not a pipe).
The slow-replica scenario runs it as a separate process so that it takes no CPU from the generator.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Sequence

import uvloop

__all__ = ["DelayProxy"]

_CHUNK = 65536


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy reader to writer, each chunk ``delay`` seconds after it was read."""
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def forward() -> None:
        while True:
            due, chunk = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not chunk or writer.is_closing():  # uvloop raises on a write to a closed transport
                break
            writer.write(chunk)
            await writer.drain()

    sender = asyncio.create_task(forward())
    try:
        while chunk := await reader.read(_CHUNK):
            queue.put_nowait((time.monotonic() + delay, chunk))
        queue.put_nowait((time.monotonic() + delay, b""))
        await sender
    except (ConnectionError, OSError):
        pass
    finally:
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
            await sender
        writer.close()


class DelayProxy:
    """The proxy's listening socket and its open connections; answers reach clients ``delay`` s late."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int], delay: float) -> None:
        self.listen, self.target, self.delay = listen, target, delay
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connect, *self.listen)

    async def close(self) -> None:
        """Stop accepting, then end every connection, so no handler is left to be cancelled mid-copy."""
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.close()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        writers = {writer}
        self._writers.add(writer)
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
            writers.add(server_writer)
            self._writers.add(server_writer)
            await asyncio.gather(
                _pump(reader, server_writer, 0.0),
                _pump(server_reader, writer, self.delay),
            )
        except OSError:
            pass  # the server is down: the client sees its connection closed
        finally:
            for each in writers:
                each.close()
            self._writers -= writers
            self._handlers.discard(handler)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host.startswith("127."):
        raise argparse.ArgumentTypeError(f"loopback addresses only (127.x.x.x:PORT), got {text!r}")
    return host, int(port)


async def _main(listen: tuple[str, int], target: tuple[str, int], delay: float) -> None:
    proxy = DelayProxy(listen, target, delay)
    await proxy.start()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    await stop.wait()
    await proxy.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.delay_proxy", description=__doc__)
    parser.add_argument("--listen", type=_address, required=True, help="HOST:PORT to accept on")
    parser.add_argument("--target", type=_address, required=True, help="HOST:PORT of the server")
    parser.add_argument("--delay-ms", type=float, required=True, help="delay of every answer chunk")
    args = parser.parse_args(argv)
    uvloop.run(_main(args.listen, args.target, args.delay_ms / 1000))
    return 0


if __name__ == "__main__":
    sys.exit(main())
