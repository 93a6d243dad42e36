"""The peer's connection state machine (kvnode.replica.peer_state), driven by hand through every
transition: no loop, no sockets, no timers; the test feeds the events and the time, arrivals and the
heartbeat's ticks included (its failure detector has the default settings and a 250 ms heartbeat)."""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from kvnode.replica.peer_state import (
    AttemptFailure,
    CallAction,
    InvalidTransition,
    PeerLife,
    PeerState,
)


def life_in(state: PeerState, *, attempting: bool = False) -> PeerLife:
    """A machine brought to ``state`` by the events that lead there, then its attempt started if asked
    (which moves idle, down and refused to connecting)."""
    life = PeerLife()
    if state is PeerState.CLOSED:
        life.close()
        return life
    if state is not PeerState.IDLE:
        assert life.probe()
        if state is PeerState.CONNECTED:
            assert life.connected(now=1.0)
        elif state is PeerState.SUSPECT:
            life.attempt_failed(AttemptFailure.NO_ANSWER, now=1.0)
        elif state is PeerState.DOWN:
            life.attempt_failed(AttemptFailure.UNREACHABLE, now=1.0)
        elif state is PeerState.REFUSED:
            life.attempt_failed(AttemptFailure.DENIED, now=1.0, refusal="secret")
    assert life.state is state
    if attempting and state is not PeerState.CONNECTING:
        assert life.probe()
    return life


# --- calls ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "attempting", "action", "after"),
    [
        (PeerState.IDLE, False, CallAction.CONNECT_AND_WAIT, PeerState.CONNECTING),
        (PeerState.CONNECTING, True, CallAction.WAIT, PeerState.CONNECTING),
        (PeerState.CONNECTED, False, CallAction.SEND, PeerState.CONNECTED),
        (PeerState.SUSPECT, False, CallAction.PROBE_AND_FAIL, PeerState.SUSPECT),
        (PeerState.SUSPECT, True, CallAction.FAIL, PeerState.SUSPECT),
        (PeerState.DOWN, False, CallAction.CONNECT_AND_WAIT, PeerState.CONNECTING),
        (PeerState.REFUSED, False, CallAction.CONNECT_AND_WAIT, PeerState.CONNECTING),
        (PeerState.CLOSED, False, CallAction.FAIL, PeerState.CLOSED),
    ],
)
def test_a_call_is_sent_waits_or_fails_and_starts_at_most_one_attempt(
    state: PeerState, attempting: bool, action: CallAction, after: PeerState
) -> None:
    life = life_in(state, attempting=attempting)
    assert life.call() is action
    assert life.state is after
    assert life.attempting is (action.connects or attempting)
    assert not life.probe()  # never a second attempt while one is out, none while connected or closed


def test_call_actions_say_whether_to_connect_and_whether_to_fail() -> None:
    assert [(a.connects, a.fails) for a in CallAction] == [
        (False, False),
        (False, False),
        (True, False),
        (True, True),
        (False, True),
    ]


def test_no_attempt_starts_while_connected_or_closed() -> None:
    assert not life_in(PeerState.CONNECTED).probe()
    assert not life_in(PeerState.CLOSED).probe()


# --- a connect attempt's outcome -------------------------------------------------------------------------


@pytest.mark.parametrize("start", [PeerState.IDLE, PeerState.DOWN, PeerState.REFUSED, PeerState.SUSPECT])
def test_an_attempt_that_succeeds_connects_and_ends_the_down_time(start: PeerState) -> None:
    life = life_in(start, attempting=True)
    assert life.connected(now=50.0)
    assert (life.state, life.attempting, life.refusal, life.down_for(now=50.0)) == (
        PeerState.CONNECTED,
        False,
        "",
        0.0,
    )


@pytest.mark.parametrize(
    ("failure", "after"),
    [
        (AttemptFailure.NO_ANSWER, PeerState.SUSPECT),
        (AttemptFailure.UNREACHABLE, PeerState.DOWN),
        (AttemptFailure.DENIED, PeerState.REFUSED),
    ],
)
@pytest.mark.parametrize("start", [PeerState.IDLE, PeerState.DOWN, PeerState.SUSPECT, PeerState.REFUSED])
def test_an_attempt_that_fails_says_how(start: PeerState, failure: AttemptFailure, after: PeerState) -> None:
    life = life_in(start, attempting=True)
    life.attempt_failed(failure, now=7.0, refusal="secret")
    assert life.state is after and not life.attempting
    assert life.refusal == ("secret" if after is PeerState.REFUSED else "")
    # Down since the first failure without an answer in between: 1.0 when the way there failed already.
    assert life.down_for(now=10.0) == (3.0 if start is PeerState.IDLE else 9.0)


def test_a_refused_peer_is_tried_again_at_once_and_forgets_its_refusal() -> None:
    life = life_in(PeerState.REFUSED)
    assert life.refusal == "secret"
    assert life.call() is CallAction.CONNECT_AND_WAIT
    assert (life.state, life.refusal) == (PeerState.CONNECTING, "")


# --- events on the connection ----------------------------------------------------------------------------


def test_a_lost_connection_is_down_since_then_and_the_next_call_connects() -> None:
    life = life_in(PeerState.CONNECTED)
    life.lost(now=100.0)
    assert life.state is PeerState.DOWN
    assert life.down_for(now=115.0) == 15.0  # not reset by the attempts that follow
    assert life.call() is CallAction.CONNECT_AND_WAIT
    life.attempt_failed(AttemptFailure.UNREACHABLE, now=114.9)
    assert life.down_for(now=115.0) == 15.0


def heard_steadily(life: PeerLife, until: float, every: float = 0.25) -> float:
    """Arrivals every ``every`` seconds from 1.0 (when life_in connects) to ``until``; the last one's time."""
    now = 1.0
    while now + every <= until:
        now += every
        life.heard(now=now)
    return now


def test_a_steady_peer_ticks_on_connected_and_not_lagging() -> None:
    life = life_in(PeerState.CONNECTED)
    last = heard_steadily(life, 30.0)
    for quiet in (0.0, 0.25, 0.5, 1.0):
        assert life.tick(now=last + quiet) is None
        assert not life.lagging(last + quiet)
    assert life.state is PeerState.CONNECTED


def test_a_peer_quieter_than_its_pace_is_lagging_but_stays_connected() -> None:
    """Quiet for two seconds (a held event loop): phi is over 1, under the threshold of 8."""
    life = life_in(PeerState.CONNECTED)
    last = heard_steadily(life, 30.0)
    assert life.lagging(last + 2.0)
    assert life.tick(now=last + 2.0) is None
    assert life.state is PeerState.CONNECTED and life.call() is CallAction.SEND
    life.heard(now=last + 2.1)  # it answers again: no longer lagging
    assert not life.lagging(last + 2.2)


def test_a_convicted_peer_is_suspect_until_its_probe_answers() -> None:
    life = life_in(PeerState.CONNECTED)
    last = heard_steadily(life, 20.0)
    assert life.tick(now=last + 2.5) is PeerState.SUSPECT
    assert life.state is PeerState.SUSPECT and not life.lagging(last + 2.5)
    assert life.down_for(now=last + 3.5) == 1.0  # down since the conviction
    assert life.tick(now=last + 3.0) is None  # not connected: the detector is not asked
    assert life.probe()
    assert life.call() is CallAction.FAIL
    assert life.connected(now=last + 4.0)
    assert life.state.value == "connected"
    # The new connection is an arrival, and the outage was no interval: judged as before.
    assert life.tick(now=last + 5.0) is None and not life.lagging(last + 5.0)


def test_an_arrival_ends_the_down_time_and_a_failure_starts_it_once() -> None:
    life = life_in(PeerState.CONNECTED)
    life.failed(3.0)  # a call timed out
    life.failed(4.0)
    assert life.down_for(now=5.0) == 2.0
    life.heard(now=5.0)
    assert life.down_for(now=5.0) == 0.0


# --- close, and events that cannot happen ------------------------------------------------------------------


@pytest.mark.parametrize("start", [state for state in PeerState if state is not PeerState.CLOSED])
def test_close_ends_every_state_and_later_outcomes_are_ignored(start: PeerState) -> None:
    life = life_in(start, attempting=start in (PeerState.SUSPECT, PeerState.CONNECTING))
    life.close()
    assert (life.state, life.attempting) == (PeerState.CLOSED, False)
    assert not life.connected(now=1.0)  # an attempt that ends after close: the caller closes its connection
    life.attempt_failed(AttemptFailure.NO_ANSWER, now=1.0)
    life.lost(now=1.0)
    assert life.tick(now=100.0) is None
    assert life.state is PeerState.CLOSED
    assert life.call() is CallAction.FAIL


NOT_CONNECTED = [PeerState.IDLE, PeerState.SUSPECT, PeerState.DOWN, PeerState.REFUSED]
_CANNOT_HAPPEN: dict[str, tuple[Callable[[PeerLife], object], str, list[PeerState]]] = {
    "connected": (
        lambda life: life.connected(now=1.0),
        "no connect attempt",
        [*NOT_CONNECTED, PeerState.CONNECTED],
    ),
    "attempt_failed": (
        lambda life: life.attempt_failed(AttemptFailure.UNREACHABLE, now=1.0),
        "no connect attempt",
        [*NOT_CONNECTED, PeerState.CONNECTED],
    ),
    "lost": (lambda life: life.lost(now=1.0), "not connected", [*NOT_CONNECTED, PeerState.CONNECTING]),
}


@pytest.mark.parametrize(
    ("event", "reason", "start"),
    [
        pytest.param(event, reason, start, id=f"{name}-while-{start.value}")
        for name, (event, reason, starts) in _CANNOT_HAPPEN.items()
        for start in starts
    ],
)
def test_an_event_that_cannot_happen_is_refused_and_changes_nothing(
    event: Callable[[PeerLife], object], reason: str, start: PeerState
) -> None:
    """An attempt's outcome with no attempt out, or a connection event while not connected: a bug in the
    caller, refused rather than taken."""
    life = life_in(start)
    with pytest.raises(InvalidTransition, match=reason):
        event(life)
    assert life.state is start


# --- the heartbeat's pings: a peer's ping as an arrival, and one ping a pair a beat ----------------------

INTERVAL = 0.25  # the heartbeat's, at the default replica timeout of one second


@pytest.mark.parametrize("start", [*NOT_CONNECTED, PeerState.CONNECTING, PeerState.CLOSED])
def test_a_ping_received_while_not_connected_is_no_arrival(start: PeerState) -> None:
    life = life_in(start)
    life.pinged(now=5.0, busy=False)
    assert life.detector.quiet_for(6.0) == 0.0  # 0 before the first arrival: the ping was none
    assert life.down_for(now=6.0) == (5.0 if start in NOT_CONNECTED[1:] else 0.0)  # nor ended the down time


def test_a_ping_received_is_an_arrival_only_while_no_call_is_in_flight() -> None:
    life = life_in(PeerState.CONNECTED)
    last = heard_steadily(life, 20.0)
    life.failed(last + 0.5)  # a call timed out
    life.pinged(now=last + 1.0, busy=True)  # a call is in flight: its reply, not the ping, must come
    assert life.detector.quiet_for(last + 1.0) == 1.0 and life.down_for(now=last + 1.0) == 0.5
    life.pinged(now=last + 1.25, busy=False)
    assert life.detector.quiet_for(last + 1.25) == 0.0 and life.down_for(now=last + 1.25) == 0.0


def test_a_peer_that_pings_but_leaves_the_calls_unanswered_is_convicted_by_its_silence() -> None:
    life = life_in(PeerState.CONNECTED)
    last = heard_steadily(life, 20.0)
    now = last
    while life.tick(now=now) is None:
        now += INTERVAL
        life.pinged(now=now - 0.1, busy=True)  # its own channel's heartbeat, while this end's calls wait
    assert life.state is PeerState.SUSPECT and 2.0 <= now - last <= 2.5


def test_a_busy_or_leading_end_pings_after_half_a_beat_the_other_while_the_leader_is_silent() -> None:
    life = life_in(PeerState.CONNECTED)  # connected at 1.0: an arrival
    life.pinged(now=1.1, busy=False)
    for quiet in (0.1, 0.125, 0.5, 0.725):  # the leader's last ping 2.5 beats ago at 0.725
        now = 1.1 + quiet
        pings = {
            (leads, busy): life.pings(now=now, interval=INTERVAL, leads=leads, busy=busy)
            for leads in (False, True)
            for busy in (False, True)
        }
        half_a_beat = quiet >= INTERVAL / 2
        assert pings == {
            (False, False): quiet >= 2.5 * INTERVAL,
            (False, True): half_a_beat,
            (True, False): half_a_beat,
            (True, True): half_a_beat,
        }, quiet


@dataclass
class End:
    """One member's end of a pair, as PeerReplica drives its PeerLife: a beat every INTERVAL from
    ``phase`` that ticks, then makes the CLOCK call every eighth beat, else asks whether to ping."""

    phase: float
    leads: bool
    life: PeerLife = field(default_factory=PeerLife)
    busy_until: float = -math.inf  # its CLOCK call is in flight until then
    pings: list[float] = field(default_factory=list)  # when it pinged
    convicted: float | None = None
    frozen: float = math.inf  # from then on it neither beats nor answers
    counts_pings: bool = True  # False: as before, the other end's pings answered and nothing more

    def busy(self, now: float) -> bool:
        return now < self.busy_until


def simulate(first: End, second: End, *, seconds: float = 60.0, trip: float = 0.002) -> None:
    """Both ends connected at 0, then beating for ``seconds``: a ping reaches the other end a ``trip``
    after it is sent (an arrival there, if its channel is idle), its pong comes back a trip later (an
    arrival here), and a CLOCK call's reply likewise; a frozen end answers nothing. Events at one instant
    run beats first: a ping sent at the instant another end beats has not reached it."""
    events: list[tuple[float, int, int, str, int, End]] = []  # (when, beats first, order, what, beat, whose)
    order = itertools.count()

    def arrives(when: float, what: str, end: End) -> None:
        heapq.heappush(events, (when, 1, next(order), what, 0, end))

    for end in (first, second):
        assert end.life.probe() and end.life.connected(now=0.0)
        for beat in range(1, int(seconds / INTERVAL) + 1):
            heapq.heappush(events, (end.phase + beat * INTERVAL, 0, next(order), "beat", beat, end))
    while events:
        now, _, _, what, beat, end = heapq.heappop(events)
        other = second if end is first else first
        if now >= end.frozen or end.convicted is not None:
            continue
        if what == "heard":
            end.life.heard(now=now)
        elif what == "pinged":
            if end.counts_pings:
                end.life.pinged(now=now, busy=end.busy(now))
            arrives(now + trip, "heard", other)  # the pong
        elif end.life.tick(now=now) is PeerState.SUSPECT:
            end.convicted = now
        elif beat % 8 == 0:  # the CLOCK call, in place of the ping
            end.busy_until = now + 2 * trip
            if now + trip < other.frozen:
                arrives(now + 2 * trip, "heard", end)
        elif end.life.pings(now=now, interval=INTERVAL, leads=end.leads, busy=end.busy(now)):
            end.pings.append(now)
            arrives(now + trip, "pinged", other)


def pings_a_beat(*ends: End, after: float = 2.0, seconds: float = 60.0) -> float:
    """The pings the ends sent a beat, together, once the first two seconds settled them."""
    sent = sum(1 for end in ends for at in end.pings if at >= after)
    return sent / ((seconds - after) / INTERVAL)


# Where the second end's beats fall after the first's, within a beat: together (as on one host, whose
# nodes share the loop's clock), less than a trip after, just either side of half a beat, just before.
PHASES = [0.0, 0.001, 0.05, 0.124, 0.126, 0.2, 0.249]


@pytest.mark.parametrize("lag", PHASES)
@pytest.mark.parametrize("leader_first", [True, False])
def test_an_idle_pair_settles_on_one_ping_a_beat_whichever_end_beats_first(
    lag: float, leader_first: bool
) -> None:
    """Whichever end pings, the other hears it and sends none: where the other's beat comes just before
    the leader's, its first pings keep the leader quiet, and it goes on pinging for the pair."""
    leader, other = End(0.0 if leader_first else lag, True), End(lag if leader_first else 0.0, False)
    simulate(leader, other)
    assert leader.convicted is None and other.convicted is None
    assert pings_a_beat(leader, other) == 7 / 8  # one a beat, but at the CLOCK call's (both make it)
    for end in (leader, other):  # each end hears the other every beat, as when each pinged for itself
        assert end.life.detector.quiet_for(60.0) < INTERVAL + 0.01


@pytest.mark.parametrize("lag", PHASES)
def test_half_a_beat_of_quiet_alone_settles_a_pair_only_where_its_beats_do_not_coincide(lag: float) -> None:
    """Both ends leading, pings counted but no lower URL leading: the second to beat hears the first's
    ping and keeps its own, unless the two leave within a trip of each other, as on one host: then they
    cross, and each end pings at every beat (why the lower URL leads)."""
    first, second = End(0.0, True), End(lag, True)
    simulate(first, second)
    if min(lag, INTERVAL - lag) < 0.002:  # within a trip of each other, either way round
        assert pings_a_beat(first, second) == 2 * 7 / 8
    else:  # the first end pings again after the CLOCK call's beat: at most one a beat
        assert 7 / 8 <= pings_a_beat(first, second) <= 1


@pytest.mark.parametrize("lag", [0.0, 0.1, 0.2])
@pytest.mark.parametrize("frozen_leads", [True, False])
def test_a_frozen_end_is_convicted_as_before_pings_counted(lag: float, frozen_leads: bool) -> None:
    """An end frozen at 30 s (SIGSTOP: no beat, no answer, no ping) is convicted by the other about 2.3 s
    after it was last heard from, plus up to a beat until the tick that finds it (docs/replica-channel.md),
    whether it led the pair or not: within a beat of when each end pinged for itself and counted no ping."""
    convicted: list[float] = []
    for before in (False, True):
        frozen, watching = End(0.0, frozen_leads, frozen=30.0), End(lag, not frozen_leads)
        if before:
            frozen.leads = watching.leads = True
            frozen.counts_pings = watching.counts_pings = False
        simulate(frozen, watching)
        assert watching.convicted is not None and frozen.convicted is None
        assert 2.0 <= watching.convicted - 30.0 <= 2.6, before
        convicted.append(watching.convicted)
    assert abs(convicted[0] - convicted[1]) <= INTERVAL
