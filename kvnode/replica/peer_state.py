"""A peer's connection state and its named transitions. Pure: no I/O, no timers.

As etcd's raft keeps each follower's ``StateType`` in its progress tracker, the peer replica feeds this
machine the events it sees (a call, a connect attempt's outcome, a lost or silent channel, close) with
the loop's time, and acts on what it answers: start a connect attempt, send a call, fail it at once.

    idle        no connection yet, and none has failed: a call starts a connect attempt
    connecting  one connect attempt under way: calls wait for it within their own deadline
    connected   calls are sent
    suspect     the peer did not answer (a connect timed out, a heartbeat found it silent): calls fail
                at once while one probe (a connect attempt) is out; its first answer restores the peer
    down        the peer refused the connection or closed it: the next call connects again at once
    refused     the peer refused the handshake (``refusal`` says why, e.g. "secret"): likewise retried
    closed      this node closed the replica: calls fail, nothing connects

    >>> life = PeerLife()
    >>> life.call(), life.state
    (<CallAction.CONNECT_AND_WAIT: 'connect_and_wait'>, <PeerState.CONNECTING: 'connecting'>)
    >>> life.attempt_failed(AttemptFailure.NO_ANSWER, now=5.0); life.state
    <PeerState.SUSPECT: 'suspect'>
    >>> life.call(), life.call()
    (<CallAction.PROBE_AND_FAIL: 'probe_and_fail'>, <CallAction.FAIL: 'fail'>)
    >>> life.connected(), life.state, life.down_for(now=9.0)
    (True, <PeerState.CONNECTED: 'connected'>, 0.0)
"""

from __future__ import annotations

import enum

__all__ = ["AttemptFailure", "CallAction", "InvalidTransition", "PeerLife", "PeerState"]


class PeerState(enum.Enum):
    IDLE = "idle"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    SUSPECT = "suspect"
    DOWN = "down"
    REFUSED = "refused"
    CLOSED = "closed"


class AttemptFailure(enum.Enum):
    """How a connect attempt failed."""

    NO_ANSWER = "no_answer"  # timed out: a frozen or unreachable host
    UNREACHABLE = "unreachable"  # refused or reset at the TCP level: nothing listens
    DENIED = "denied"  # the handshake was refused: another cluster's node, or another secret


class CallAction(enum.Enum):
    """What to do with a call made now."""

    SEND = "send"
    WAIT = "wait"  # a connect attempt is under way: the call waits for it
    CONNECT_AND_WAIT = "connect_and_wait"  # start a connect attempt, and the call waits for it
    PROBE_AND_FAIL = "probe_and_fail"  # suspect: start the probe, and fail the call at once
    FAIL = "fail"  # suspect with its probe out, or closed: fail the call at once

    @property
    def connects(self) -> bool:
        return self is CallAction.CONNECT_AND_WAIT or self is CallAction.PROBE_AND_FAIL

    @property
    def fails(self) -> bool:
        return self is CallAction.PROBE_AND_FAIL or self is CallAction.FAIL


class InvalidTransition(RuntimeError):
    """An event that cannot happen in the current state: a bug in the caller, never the peer's doing."""


_NOT_CONNECTED_RETRIED = frozenset((PeerState.IDLE, PeerState.DOWN, PeerState.REFUSED))


class PeerLife:
    """One peer's state, whether a connect attempt is out, and since when it has failed without an answer."""

    __slots__ = ("_down_since", "attempting", "refusal", "state")

    def __init__(self) -> None:
        self.state = PeerState.IDLE
        self.attempting = False  # a connect attempt is under way (connecting, or suspect with its probe out)
        self.refusal = ""  # while refused: what the handshake's refusal was about
        self._down_since: float | None = None  # loop time of the first failure since the peer last answered

    # --- events from calls and operators ------------------------------------------------------------------

    def call(self) -> CallAction:
        """A call is made now."""
        state = self.state
        if state is PeerState.CONNECTED:
            return CallAction.SEND
        if state is PeerState.CLOSED:
            return CallAction.FAIL
        if state is PeerState.SUSPECT:
            return CallAction.PROBE_AND_FAIL if self.probe() else CallAction.FAIL
        return CallAction.CONNECT_AND_WAIT if self.probe() else CallAction.WAIT

    def probe(self) -> bool:
        """A connection is wanted (a call, hint delivery, an operator's view); True: start an attempt now.
        Only one attempt is out at a time, and none while connected or closed."""
        if self.attempting or self.state is PeerState.CONNECTED or self.state is PeerState.CLOSED:
            return False
        self.attempting = True
        if self.state in _NOT_CONNECTED_RETRIED:
            self.state = PeerState.CONNECTING
            self.refusal = ""
        return True

    # --- the connect attempt's outcome ----------------------------------------------------------------

    def connected(self) -> bool:
        """The attempt under way succeeded. False when the replica was closed meanwhile: the caller closes
        the new connection."""
        if self.state is PeerState.CLOSED:
            return False
        self._require_attempt("connected")
        self.state, self.attempting, self._down_since = PeerState.CONNECTED, False, None
        return True

    def attempt_failed(self, failure: AttemptFailure, *, now: float, refusal: str = "") -> None:
        """The attempt under way failed: no answer makes the peer suspect, a refused connection down, a
        refused handshake refused (``refusal`` says what it was about)."""
        if self.state is PeerState.CLOSED:
            return
        self._require_attempt("attempt_failed")
        self.attempting = False
        self.failed(now)
        if failure is AttemptFailure.NO_ANSWER:
            self.state = PeerState.SUSPECT
        elif failure is AttemptFailure.UNREACHABLE:
            self.state = PeerState.DOWN
        else:
            self.state, self.refusal = PeerState.REFUSED, refusal

    # --- events on the connection ------------------------------------------------------------------------

    def lost(self, *, now: float) -> None:
        """The connection ended (the peer closed it, or it broke): the next call connects again."""
        self._leave_connected("lost", PeerState.DOWN, now)

    def silent(self, *, now: float) -> None:
        """The heartbeat found the connection silent for a whole timeout: the peer is suspect."""
        self._leave_connected("silent", PeerState.SUSPECT, now)

    def _leave_connected(self, event: str, state: PeerState, now: float) -> None:
        if self.state is PeerState.CLOSED:
            return
        if self.state is not PeerState.CONNECTED:
            raise InvalidTransition(f"{event} while {self.state.value}, not connected")
        self.state = state
        self.failed(now)

    def failed(self, now: float) -> None:
        """A call or attempt failed without an answer (a timeout counts too): the peer is down since then,
        unless it already was."""
        if self._down_since is None:
            self._down_since = now

    def answered(self) -> None:
        """The peer answered something: it is not down."""
        self._down_since = None

    def close(self) -> None:
        self.state, self.attempting = PeerState.CLOSED, False

    # --- queries --------------------------------------------------------------------------------------------

    def down_for(self, now: float) -> float:
        """Seconds since the peer last failed with no answer in between (0 while it answers)."""
        since = self._down_since
        return 0.0 if since is None else now - since

    def _require_attempt(self, event: str) -> None:
        if not self.attempting:
            raise InvalidTransition(f"{event} with no connect attempt under way (state {self.state.value})")
