"""kvnode.clocks.offsets: offsets from round trips, kept recent and aged out, driven by hand. No I/O."""

from __future__ import annotations

from kvnode.clocks.offsets import ClockOffsets, Offset, measure


def test_a_round_trip_measures_the_offset_from_its_midpoint_within_half_the_trip() -> None:
    assert measure(sent_us=10_000, remote_us=70_015_000, received_us=20_000) == Offset(70_000_000, 5_000)
    assert measure(sent_us=10_000, remote_us=15_000, received_us=20_000) == Offset(0, 5_000)
    assert measure(sent_us=10_000, remote_us=-49_985_000, received_us=20_000).offset_us == -50_000_000


def test_a_wall_clock_stepping_back_mid_trip_is_no_negative_uncertainty() -> None:
    assert measure(sent_us=20_000, remote_us=20_000, received_us=10_000) == Offset(0, 0)


def test_the_most_certain_recent_measurement_is_the_estimate() -> None:
    offsets = ClockOffsets(max_age_s=10.0)
    offsets.record("b", Offset(1_000, 900), at_s=0.0)
    offsets.record("b", Offset(400, 100), at_s=1.0)  # the shortest round trip
    offsets.record("b", Offset(700, 700), at_s=2.0)
    assert offsets.estimates(now_s=3.0) == {"b": Offset(400, 100)}


def test_a_stepped_clock_is_judged_by_its_new_offset_at_once() -> None:
    offsets = ClockOffsets(max_age_s=10.0)
    offsets.record("b", Offset(60_000_000, 100), at_s=0.0)
    offsets.record("b", Offset(200, 900), at_s=1.0)  # less certain, but the old ones disagree with it
    assert offsets.estimates(now_s=1.5) == {"b": Offset(200, 900)}


def test_measurements_age_out_and_only_a_few_are_kept() -> None:
    offsets = ClockOffsets(max_age_s=10.0)
    offsets.record("b", Offset(400, 100), at_s=0.0)
    offsets.record("b", Offset(900, 300), at_s=5.0)
    assert offsets.estimates(now_s=12.0) == {"b": Offset(900, 300)}  # the first is older than 10 s
    assert offsets.estimates(now_s=16.0) == {}  # none left: no estimate
    for step in range(20):
        offsets.record("c", Offset(step, 1_000 if step else 1), at_s=20.0 + step)
    assert offsets.estimates(now_s=40.0)["c"].uncertainty_us == 1_000  # the best one was pushed out


def test_each_peer_is_estimated_apart() -> None:
    offsets = ClockOffsets(max_age_s=10.0)
    offsets.record("b", Offset(60_000_000, 500), at_s=0.0)
    offsets.record("c", Offset(-200, 300), at_s=9.0)
    assert offsets.estimates(now_s=9.5) == {"b": Offset(60_000_000, 500), "c": Offset(-200, 300)}
    assert offsets.estimates(now_s=10.5) == {"c": Offset(-200, 300)}
