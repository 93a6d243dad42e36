"""The delay line's pure core, step by step: each packet held its time and no longer, in the order it
came, and the figures of what passed (how many, the most held at once, how late the latest left)."""

from __future__ import annotations

import pytest

from loadtest.wan_delay import DelayLine


def test_a_packet_leaves_once_it_was_held_its_time_and_not_before() -> None:
    line = DelayLine(hold_s=0.025)
    line.put(b"a", now=10.0)
    assert line.due(now=10.0249) == []
    assert line.wait_s(now=10.0249) == pytest.approx(0.0001)
    assert line.due(now=10.025) == [b"a"]
    assert line.wait_s(now=10.025) is None
    figures = {"hold_ms": 25.0, "packets": 1, "most_held": 1, "late_over_1ms": 0, "latest_ms": 0}
    assert line.figures() == figures


def test_packets_leave_in_the_order_they_came() -> None:
    line = DelayLine(hold_s=0.01)
    for index, now in enumerate((1.0, 1.001, 1.001, 1.005)):
        line.put(bytes([index]), now)
    assert line.due(now=1.0115) == [b"\x00", b"\x01", b"\x02"]
    assert line.wait_s(now=1.0115) == pytest.approx(0.0035)
    assert line.due(now=1.02) == [b"\x03"]
    assert line.figures()["most_held"] == 4


def test_a_packet_that_leaves_late_is_counted_with_how_late() -> None:
    line = DelayLine(hold_s=0.0)  # held no time: what a 0 ms line adds is the loop's own lateness
    line.put(b"on time", now=5.0)
    line.put(b"late", now=5.0)
    assert line.due(now=5.0005) == [b"on time", b"late"]  # 0.5 ms: not late
    line.put(b"later", now=6.0)
    assert line.due(now=6.003) == [b"later"]
    figures = line.figures()
    assert (figures["late_over_1ms"], figures["latest_ms"]) == (1, 3.0)
    assert figures["packets"] == 3


def test_a_negative_delay_is_refused() -> None:
    with pytest.raises(ValueError, match="not negative"):
        DelayLine(hold_s=-0.001)
