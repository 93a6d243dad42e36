"""The phi accrual failure detector's maths (kvnode.replica.failure_detector), with the times fed by hand:
a steady peer, a slow one, one that pauses, and a dead one, under the default settings; and a peer in
another datacenter, whose round trips allow it a longer pause."""

from __future__ import annotations

import math
import random

import pytest

from kvnode.config import NodeConfig
from kvnode.replica.failure_detector import SUSPECT_PHI, DetectorSettings, FailureDetector

BEAT = 0.25  # the heartbeat interval at the default replica timeout (1 s, four beats)


def heard(intervals: list[float], *, first_interval: float = BEAT) -> tuple[FailureDetector, float]:
    """A detector with default settings that heard a peer at time 0 and then after each interval; and
    the time of the last arrival."""
    detector = FailureDetector(DetectorSettings(), first_interval=first_interval)
    now = 0.0
    detector.heartbeat(now)
    for interval in intervals:
        now += interval
        detector.heartbeat(now)
    return detector, now


def conviction_after(detector: FailureDetector, last: float) -> float:
    """Seconds after ``last`` at which the detector first convicts, to the millisecond."""
    quiet = 0.0
    while not detector.convicted(last + quiet):
        quiet += 0.001
        assert quiet < 60, "never convicted"
    return quiet


def test_nothing_heard_yet_is_no_suspicion() -> None:
    detector = FailureDetector(DetectorSettings(), first_interval=BEAT)
    assert detector.phi(1000.0) == 0.0 and not detector.convicted(1000.0)
    assert detector.quiet_for(1000.0) == 0.0


def test_a_steady_peer_never_lags_between_its_beats() -> None:
    detector, last = heard([BEAT] * 400)
    for quiet in (0.0, BEAT, 2 * BEAT, 1.0):
        assert detector.phi(last + quiet) < 0.01, quiet
    assert detector.phi(last + 1.6) < SUSPECT_PHI


def test_phi_grows_with_the_silence() -> None:
    detector, last = heard([BEAT] * 400)
    levels = [detector.phi(last + quiet / 10) for quiet in range(30)]
    assert levels == sorted(levels)
    assert levels[-1] > DetectorSettings().threshold


def test_a_slow_peer_is_judged_by_its_own_pace() -> None:
    """Answers 0.5 to 1.5 s apart (a peer on a loaded machine): each gap as long as its usual ones is no
    suspicion, although a steady 250 ms peer would lag after such a gap plus the pause."""
    slow = [0.5, 1.5, 1.0, 0.7, 1.3] * 40
    detector, last = heard(slow)
    for quiet in slow[:5]:
        assert not detector.convicted(last + quiet)
        assert detector.phi(last + quiet) < SUSPECT_PHI
    steady, steady_last = heard([BEAT] * 200)
    assert conviction_after(detector, last) > conviction_after(steady, steady_last) + 1.0


def test_one_pause_within_the_acceptable_pause_is_not_a_conviction() -> None:
    detector, last = heard([BEAT] * 400)
    pause = DetectorSettings().acceptable_pause  # the loop held that long, plus the usual beat
    assert not detector.convicted(last + pause + BEAT)
    detector.heartbeat(last + pause + BEAT)  # it answers again
    # The long interval is one of 400: the peer is judged as before.
    assert detector.phi(last + pause + 2 * BEAT) < 0.01


@pytest.mark.parametrize(("label", "interval"), [("idle", BEAT), ("busy", 0.002)])
def test_a_dead_peer_is_convicted_about_two_seconds_after_it_was_last_heard(
    label: str, interval: float
) -> None:
    """Idle, a peer is heard at each heartbeat; busy, a reply every 2 ms. Either way conviction comes
    after the acceptable pause and within about two seconds."""
    detector, last = heard([interval] * 1000)
    after = conviction_after(detector, last)
    assert DetectorSettings().acceptable_pause < after <= 2.3, (label, after)


def test_the_window_forgets_the_oldest_intervals() -> None:
    """A peer that was slow and is steady now is judged by its recent pace: the window holds 1000."""
    detector, last = heard([2.0] * 1000 + [BEAT] * 1000)
    recent, recent_last = heard([BEAT] * 1000)
    assert conviction_after(detector, last) == pytest.approx(conviction_after(recent, recent_last), abs=0.01)


def test_a_restart_is_an_arrival_but_not_an_interval() -> None:
    """A new connection after an outage: judged from the reconnection, and the outage does not count."""
    detector, last = heard([BEAT] * 400)
    detector.restart(last + 60.0)
    assert detector.quiet_for(last + 60.5) == 0.5
    assert detector.phi(last + 60.5) < 0.01
    assert conviction_after(detector, last + 60.0) <= 2.3


@pytest.mark.parametrize(
    "settings",
    [
        {"threshold": 0.0},
        {"acceptable_pause": -1.0},
        {"min_std_deviation": 0.0},
        {"window": 1},
        {"max_distance_allowance": -0.1},
    ],
)
def test_invalid_settings_are_refused(settings: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="invalid failure detector settings"):
        DetectorSettings(**settings)  # type: ignore[arg-type]


def test_the_node_flags_default_to_the_detectors_defaults() -> None:
    node = NodeConfig()
    assert DetectorSettings(node.phi_threshold, node.acceptable_pause_ms / 1000) == DetectorSettings()


# --- a peer far away ----------------------------------------------------------------------------------


def wan_history(
    detector: FailureDetector, *, seconds: float, seed: int, stalls_every_s: float = 600.0
) -> list[float]:
    """Feed ``detector`` what an idle peer 50 ms away (a 100 ms round trip, plus up to 30 ms of jitter each
    way) sends for ``seconds``: a pong 100-160 ms after each beat's ping, and every ``stalls_every_s`` (long
    enough for the window to forget the last) three lost segments in a row, which TCP sends again after
    1, 2 and 4 of its retransmission timeouts (Linux's: the smoothed round trip plus 200 ms), holding
    everything behind them. Each beat's tick asks the detector, as the heartbeat's does: the ticks at which
    it convicted the peer."""
    rng = random.Random(seed)
    convicted = []
    beat, next_stall = 0.0, stalls_every_s
    detector.heartbeat(beat)
    while beat < seconds:
        beat += BEAT
        if detector.convicted(beat):
            convicted.append(beat)
        if detector.quiet_for(beat) < BEAT / 2:
            continue  # the last pong came within half a beat: no ping (kvnode.replica.peer_state)
        trip = 0.1 + rng.uniform(0, 0.03) + rng.uniform(0, 0.03)
        if beat >= next_stall:
            trip += (1 + 2 + 4) * (0.13 + 0.2)
            next_stall += stalls_every_s
        convicted += [tick for tick in held_ticks(beat, trip) if detector.convicted(tick)]
        detector.heartbeat(beat + trip)
        if not beat % 2.0:  # every eighth beat's ping is a clock ping: its round trip measured
            detector.round_trip(trip)
    return convicted


def held_ticks(beat: float, trip: float) -> list[float]:
    """The heartbeat's ticks after ``beat`` while its ping's pong, ``trip`` seconds away, has not come."""
    return [beat + step * BEAT for step in range(1, math.ceil(trip / BEAT)) if step * BEAT < trip]


def test_a_far_peer_is_not_lagging_between_its_stalls() -> None:
    detector = FailureDetector(DetectorSettings(), first_interval=BEAT)
    wan_history(detector, seconds=600.0, seed=3, stalls_every_s=math.inf)
    last = 600.0 + 0.2  # a pong after the last beat
    detector.heartbeat(last)
    for quiet in (BEAT, 1.0, DetectorSettings().acceptable_pause + 0.5):
        assert detector.phi(last + quiet) < SUSPECT_PHI, quiet


def test_a_far_peer_that_stops_answering_is_convicted_within_a_bounded_time() -> None:
    """A silent peer is convicted its allowance later than one whose distance is not counted (its pace, a
    pong every beat or two, is its own either way), and that allowance is at most
    ``max_distance_allowance``, however far the peer is: a bounded time after it was last heard from."""
    far = FailureDetector(DetectorSettings(), first_interval=BEAT)
    wan_history(far, seconds=600.0, seed=5, stalls_every_s=math.inf)
    uncounted = FailureDetector(DetectorSettings(max_distance_allowance=0.0), first_interval=BEAT)
    wan_history(uncounted, seconds=600.0, seed=5, stalls_every_s=math.inf)
    later = conviction_after(far, 600.0) - conviction_after(uncounted, 600.0)
    assert later == pytest.approx(far.allowance, abs=0.002) and 0.7 <= later <= 7 * 0.16, later
    assert conviction_after(far, 600.0) < 3.5
    very_far = FailureDetector(DetectorSettings(), first_interval=BEAT)
    for beat in range(1, 1001):
        very_far.heartbeat(beat * BEAT)
        very_far.round_trip(5.0)  # a link that never answers a ping in under five seconds
    assert very_far.allowance == DetectorSettings().max_distance_allowance
    assert conviction_after(very_far, 1000 * BEAT) <= 2.3 + DetectorSettings().max_distance_allowance


def test_the_distance_is_the_shortest_recent_round_trip() -> None:
    """A loaded peer answers some pings late, never all: the shortest of the last 16 round trips is its
    distance; a clock stepped back (a negative round trip) measures nothing."""
    detector = FailureDetector(DetectorSettings(), first_interval=BEAT)
    assert (detector.distance, detector.allowance) == (0.0, 0.0)
    for trip in (0.0004, 1.2, 0.9, 0.0005):
        detector.round_trip(trip)
    assert detector.distance == 0.0004 and detector.allowance == pytest.approx(0.0028)
    detector.round_trip(-3.0)
    assert detector.distance == 0.0004
    for _ in range(16):
        detector.round_trip(0.05)  # the path changed: 16 later round trips replace the old ones
    assert detector.distance == 0.05 and detector.pause == pytest.approx(1.5 + 0.35)
