"""One connect attempt to a peer: TCP (and TLS), the challenge and the WebSocket upgrade within the replica
timeout; a failed attempt is :class:`AttemptFailed`, saying how it failed in the peer state machine's
terms (kvnode.replica.peer_state), with its connection already aborted."""

from __future__ import annotations

import asyncio
import ssl
import urllib.parse
from collections.abc import Awaitable, Callable
from functools import partial

from kvnode.replica.channel.client import ChannelListener, ClientChannel, HandshakeRefused
from kvnode.replica.channel.handshake import ClusterAuth
from kvnode.replica.channel.identities import Identities
from kvnode.replica.channel.websocket import HandshakeError, WebSocketError
from kvnode.replica.peer_state import AttemptFailure

__all__ = ["AttemptFailed", "connector", "open_channel"]


class AttemptFailed(Exception):
    """How a connect attempt failed, and why; ``refusal`` says what a refused handshake was about."""

    def __init__(self, failure: AttemptFailure, reason: str, refusal: str = "") -> None:
        super().__init__(reason)
        self.failure, self.reason, self.refusal = failure, reason, refusal


def connector(
    listener: ChannelListener,
    url: str,
    auth: ClusterAuth | None,
    max_frame: int,
    identities: Identities | None,
    *,
    ssl_context: ssl.SSLContext | None,
    timeout: float,
) -> Callable[[], Awaitable[ClientChannel]]:
    """Connect attempts to the peer at ``url`` (http://HOST:PORT or https://HOST:PORT), each with a new
    channel that tells ``listener``; a URL without a host or a port is a ValueError."""
    parts = urllib.parse.urlsplit(url)
    if parts.hostname is None or parts.port is None:
        raise ValueError(f"a peer URL is http://HOST:PORT or https://HOST:PORT, got {url!r}")
    new_channel = partial(ClientChannel, listener, url, parts.netloc, auth, max_frame, identities)
    return partial(
        open_channel, new_channel, parts.hostname, parts.port, ssl_context=ssl_context, timeout=timeout
    )


async def open_channel(
    new_channel: Callable[[], ClientChannel],
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None,
    timeout: float,
) -> ClientChannel:
    """A channel whose upgrade was accepted, or AttemptFailed."""
    channel: ClientChannel | None = None
    try:
        try:
            async with asyncio.timeout(timeout):
                _, channel = await asyncio.get_running_loop().create_connection(
                    new_channel,
                    host,
                    port,
                    ssl=ssl_context,
                    server_hostname=host if ssl_context is not None else None,
                )
                await channel.upgraded
            return channel
        except TimeoutError:
            # Nothing answered: a frozen or unreachable host. A frozen peer accepts TCP but never answers
            # the upgrade, so the half-open connection is aborted.
            raise AttemptFailed(AttemptFailure.NO_ANSWER, "no answer") from None
        except HandshakeError as error:
            cause = error.cause if isinstance(error, HandshakeRefused) else "handshake"
            raise AttemptFailed(AttemptFailure.DENIED, str(error), cause) from error
        except WebSocketError as error:  # the connection broke before the upgrade was answered
            raise AttemptFailed(AttemptFailure.UNREACHABLE, str(error)) from error
        except ssl.SSLError as error:  # a certificate the CA did not sign, on either side
            raise AttemptFailed(AttemptFailure.DENIED, f"TLS: {error.reason or error}", "tls") from error
        except OSError as error:
            raise AttemptFailed(AttemptFailure.UNREACHABLE, str(error) or type(error).__name__) from error
    except BaseException:  # a failure, or the attempt cancelled (the replica closed)
        if channel is not None:
            channel.transport.abort()
        raise
