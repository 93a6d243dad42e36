"""The phi accrual failure detector's maths (kvnode.replica.failure_detector), with the times fed by hand:
a steady peer, a slow one, one that pauses, and a dead one, under the default settings."""

from __future__ import annotations

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
    ],
)
def test_invalid_settings_are_refused(settings: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="invalid failure detector settings"):
        DetectorSettings(**settings)  # type: ignore[arg-type]


def test_the_node_flags_default_to_the_detectors_defaults() -> None:
    node = NodeConfig()
    assert DetectorSettings(node.phi_threshold, node.acceptable_pause_ms / 1000) == DetectorSettings()
