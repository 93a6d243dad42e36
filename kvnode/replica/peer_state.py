"""A peer's connection state and its named transitions. Pure: no I/O, no timers.

As etcd's raft keeps each follower's ``StateType`` in its progress tracker, the peer replica feeds this
machine the events it sees (a call, a connect attempt's outcome, an arrival, a lost channel, close) with
the loop's time, and acts on what it answers: start a connect attempt, send a call, fail it at once. The
heartbeat's timer calls :meth:`PeerLife.tick`, which asks the peer's failure detector
(:mod:`~kvnode.replica.failure_detector`) whether its silence convicts it.

    idle        no connection yet, and none has failed: a call starts a connect attempt
    connecting  one connect attempt under way: calls wait for it within their own deadline
    connected   calls are sent
    suspect     the peer did not answer (a connect timed out, or the failure detector convicted it):
                calls fail at once while one probe (a connect attempt) is out; its first answer restores it
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
    >>> life.connected(now=9.0), life.state, life.down_for(now=9.0)
    (True, <PeerState.CONNECTED: 'connected'>, 0.0)
    >>> life.heard(now=9.25); life.tick(now=10.0), life.lagging(now=10.0)  # quiet for 0.75 s: fine
    (None, False)
    >>> life.lagging(now=11.2), life.state  # 1.95 s: asked last, still connected
    (True, <PeerState.CONNECTED: 'connected'>)
    >>> life.tick(now=11.8)  # 2.55 s: convicted
    <PeerState.SUSPECT: 'suspect'>

A beat also asks :meth:`PeerLife.pings` whether to ping the peer. Each member of a pair has a channel to the
other, and a ping on either is a sign of life at both ends: the pinging end hears the pong, the pinged one
counts the ping as an arrival (:meth:`PeerLife.pinged`, while its own channel has no call in flight). A beat
pings only after half a beat with no arrival, yet that alone does not settle a pair on one ping a beat: two
pings sent less than a trip apart cross, neither end having heard the other's, and a node's beats fall on
the grid of its loop's clock (kvnode.scheduling.next_beat), which the nodes of one host share: there every
pair's beats coincide, and both ends would ping at every beat. So the member with the lower URL leads: it
pings as before, and the other, while its channel has no call in flight, only once the leader's pings stop
coming (none for 2.5 beats: the leader's channel is down, or the leader is frozen).

    >>> other = PeerLife(); other.probe() and other.connected(now=0.0)
    True
    >>> other.pinged(now=0.25, busy=False)  # the leader's ping: an arrival
    >>> other.pings(now=0.5, interval=0.25, leads=False, busy=False)  # quiet for a beat: the leader pings
    False
    >>> other.pings(now=0.5, interval=0.25, leads=True, busy=False)  # as it does, quiet for half a beat
    True
    >>> other.pings(now=0.875, interval=0.25, leads=False, busy=False)  # 2.5 beats without: it pings
    True
"""

from __future__ import annotations

import enum
import math

from kvnode.replica.failure_detector import SUSPECT_PHI, DetectorSettings, FailureDetector

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
# Beats without a ping from the leading peer after which the other pings for itself: the leader pings every
# beat (a clock ping counts), or on a channel that speaks protocol 2 or 1 skips one for its CLOCK call (two
# beats apart then), and may be a little late.
_PEER_PINGS_LAPSE = 2.5


class PeerLife:
    """One peer's state, whether a connect attempt is out, since when it has failed without an answer,
    and its failure detector (by default, default settings and a heartbeat every 250 ms)."""

    __slots__ = ("_down_since", "_pinged_at", "attempting", "detector", "refusal", "state")

    def __init__(self, detector: FailureDetector | None = None) -> None:
        self.detector = detector or FailureDetector(DetectorSettings(), first_interval=0.25)
        self.state = PeerState.IDLE
        self.attempting = False  # a connect attempt is under way (connecting, or suspect with its probe out)
        self.refusal = ""  # while refused: what the handshake's refusal was about
        self._down_since: float | None = None  # loop time of the first failure since the peer last answered
        self._pinged_at = -math.inf  # loop time of the peer's last ping to this node's server

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

    def connected(self, *, now: float) -> bool:
        """The attempt under way succeeded (an arrival). False when the replica was closed meanwhile: the
        caller closes the new connection."""
        if self.state is PeerState.CLOSED:
            return False
        self._require_attempt("connected")
        self.state, self.attempting, self._down_since = PeerState.CONNECTED, False, None
        self.detector.restart(now)
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

    def heard(self, *, now: float) -> None:
        """The connection brought something (a reply, a pong), or the peer's ping counted: an arrival, and
        the peer is not down."""
        self.detector.heartbeat(now)
        self._down_since = None

    def pinged(self, *, now: float, busy: bool) -> None:
        """The peer pinged this node's server (on its own channel to this node): an arrival while connected
        and not ``busy`` (no call in flight to the peer). With calls in flight only their replies count: a
        peer that pings this node but leaves its calls unanswered is still convicted by its silence."""
        self._pinged_at = now
        if self.state is PeerState.CONNECTED and not busy:
            self.heard(now=now)

    def pings(self, *, now: float, interval: float, leads: bool, busy: bool) -> bool:
        """Whether the heartbeat's beat at ``now`` (beats ``interval`` apart) pings the peer: once nothing
        arrived for half a beat; then, unless this end ``leads`` (it pings for the pair: the module's
        docstring says why) or is ``busy`` (calls in flight: pings do not count), not while the peer's
        pings come."""
        if self.detector.quiet_for(now) < interval / 2:
            return False  # an arrival within half a beat (a reply, a pong, the peer's ping) tells enough
        return leads or busy or now - self._pinged_at >= _PEER_PINGS_LAPSE * interval

    def tick(self, *, now: float) -> PeerState | None:
        """The heartbeat's timer: while connected, the failure detector judges the silence; a convicted
        peer is suspect (the caller gives its connection up and probes). The state entered, or None."""
        if self.state is not PeerState.CONNECTED or not self.detector.convicted(now):
            return None
        self._leave_connected(PeerState.SUSPECT, now)
        return PeerState.SUSPECT

    def lost(self, *, now: float) -> None:
        """The connection ended (the peer closed it, or it broke): the next call connects again."""
        if self.state is PeerState.CLOSED:
            return
        if self.state is not PeerState.CONNECTED:
            raise InvalidTransition(f"lost while {self.state.value}, not connected")
        self._leave_connected(PeerState.DOWN, now)

    def _leave_connected(self, state: PeerState, now: float) -> None:
        self.state = state
        self.failed(now)

    def failed(self, now: float) -> None:
        """A call or attempt failed without an answer (a timeout counts too): the peer is down since then,
        unless it already was."""
        if self._down_since is None:
            self._down_since = now

    def close(self) -> None:
        self.state, self.attempting = PeerState.CLOSED, False

    # --- queries --------------------------------------------------------------------------------------------

    def lagging(self, now: float) -> bool:
        """Connected, but quieter than its pace explains (phi at least SUSPECT_PHI): asked last."""
        # Every speculative read asks this: phi reaches 1 only past the mean interval plus the pause the
        # peer is allowed, so a silence shorter than that pause needs no phi.
        detector = self.detector
        return (
            self.state is PeerState.CONNECTED
            and detector.quiet_for(now) > detector.pause
            and detector.phi(now) >= SUSPECT_PHI
        )

    def down_for(self, now: float) -> float:
        """Seconds since the peer last failed with no answer in between (0 while it answers)."""
        since = self._down_since
        return 0.0 if since is None else now - since

    def _require_attempt(self, event: str) -> None:
        if not self.attempting:
            raise InvalidTransition(f"{event} with no connect attempt under way (state {self.state.value})")
