"""Whether a peer is alive, as a level of suspicion: the phi accrual failure detector (Hayashibara et al.,
2004), as Akka's ``PhiAccrualFailureDetector`` computes it. Pure: no I/O, no clock of its own.

Every sign of life from a peer (a reply, a pong, its ping) is an arrival. The detector keeps a bounded
window of the intervals between arrivals, and says how unlikely the present silence is for this peer:
``phi = -log10(P(an interval at least this long))``, the intervals taken as normally distributed with
the window's mean (plus the acceptable pause) and standard deviation (at least a floor). phi 1 is a one
in ten chance that a live peer is this quiet, phi 8 one in a hundred million: the peer is convicted.

A fixed silence limit cannot tell a peer whose event loop is held for a second (a loaded machine) from a
dead one. The acceptable pause is how long a steady peer may stall without lagging at all; the
window lets a peer whose answers are always far apart (a slow one) be judged by its own pace.

A peer far away (another datacenter, tens of milliseconds off) stalls longer for the same cause: a lost
segment costs TCP a retransmission timeout of at least a round trip, doubled at each loss in a row. So the
pause a peer is allowed grows with its distance, the shortest of its recent round trips (its path, not its
load: a loaded peer answers some pings late, never all): by ``ROUND_TRIPS_ALLOWED`` of them, what three
losses in a row cost beyond a peer next door, at most ``max_distance_allowance``. A peer on the same host
or LAN is a fraction of a millisecond away, and judged as before.

    >>> detector = FailureDetector(DetectorSettings(), first_interval=0.25)
    >>> for beat in range(1, 41):  # ten seconds of a steady peer, heard every 250 ms
    ...     detector.heartbeat(beat * 0.25)
    >>> round(detector.phi(10.5), 3), detector.convicted(10.5)  # quiet for 0.5 s: not lagging at all
    (0.0, False)
    >>> round(detector.phi(12.0), 1), detector.convicted(12.0)  # 2 s: lagging, still alive
    (2.2, False)
    >>> detector.convicted(12.3)  # 2.3 s: the pause is over, the peer is convicted
    True
    >>> detector.round_trip(0.1); round(detector.allowance, 3)  # 100 ms away: 7 round trips more
    0.7
    >>> detector.convicted(12.3), detector.convicted(13.0)  # convicted 0.7 s later
    (False, True)
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

__all__ = ["ROUND_TRIPS_ALLOWED", "SUSPECT_PHI", "DetectorSettings", "FailureDetector"]

# From this phi on a connected peer is lagging, and asked last: a live peer is this quiet less than one
# time in ten.
SUSPECT_PHI = 1.0
# The pause a peer is allowed beyond the acceptable pause, in its round trips: TCP retransmits a lost
# segment after a timeout of about a round trip (plus a floor every peer pays alike, which the acceptable
# pause covers), doubled at each further loss, so three losses in a row cost 1 + 2 + 4 round trips.
ROUND_TRIPS_ALLOWED = 7
_ROUND_TRIPS_KEPT = 16  # the peer's distance is the shortest of its last round trips
_LN10 = math.log(10.0)


@dataclass(frozen=True, slots=True)
class DetectorSettings:
    """How suspicious a detector is; Akka's and Cassandra's defaults, but for the pause.

    ``acceptable_pause`` (seconds): a silence this much longer than the peer's usual interval raises
    no suspicion; 1.5 s covers the event-loop stalls seen on a loaded machine (docs/replica-channel.md)
    and still convicts a dead peer about two seconds after it was last heard from."""

    threshold: float = 8.0  # phi from which the peer is convicted (Cassandra's phi_convict_threshold)
    acceptable_pause: float = 1.5
    min_std_deviation: float = 0.1  # seconds: a very regular peer is not convicted by a little jitter
    window: int = 1000  # intervals kept (Akka's max-sample-size)
    # The most a peer's distance adds to its acceptable pause (seconds): so a peer that stops answering is
    # convicted within a bounded time however far it is (about 3.3 s after it was last heard from).
    max_distance_allowance: float = 1.0

    def __post_init__(self) -> None:
        if (
            self.threshold <= 0
            or self.acceptable_pause < 0
            or self.min_std_deviation <= 0
            or self.window < 2
            or self.max_distance_allowance < 0
        ):
            raise ValueError(f"invalid failure detector settings: {self}")


class FailureDetector:
    """One peer's arrivals and the suspicion they give. Times are the caller's clock, in seconds.

    ``first_interval`` is the interval expected before any is seen (the heartbeat's): the window starts
    with two intervals around it, as Akka's does, so a peer is judged sensibly from its first arrival."""

    __slots__ = ("_intervals", "_last", "_round_trips", "_squares", "_sum", "allowance", "settings")

    def __init__(self, settings: DetectorSettings, *, first_interval: float) -> None:
        self.settings = settings
        spread = first_interval / 4
        self._intervals: deque[float] = deque()
        self._sum = 0.0
        self._squares = 0.0
        for interval in (first_interval - spread, first_interval + spread):
            self._add(interval)
        self._last: float | None = None  # the last arrival; None before the first
        self._round_trips: deque[float] = deque(maxlen=_ROUND_TRIPS_KEPT)
        self.allowance = 0.0  # seconds the peer's distance adds to the acceptable pause

    @property
    def distance(self) -> float:
        """The peer's distance: the shortest of its recent round trips (seconds; 0 before one)."""
        return min(self._round_trips, default=0.0)

    @property
    def pause(self) -> float:
        """The silence beyond the peer's usual interval that raises no suspicion: the acceptable pause,
        and the allowance for its distance."""
        return self.settings.acceptable_pause + self.allowance

    def round_trip(self, seconds: float) -> None:
        """A round trip to the peer and back took ``seconds`` (a clock measurement's: a ping, or a CLOCK
        call); a negative one (the wall clock stepped back meanwhile) is none."""
        if seconds < 0:
            return
        self._round_trips.append(seconds)
        self.allowance = min(ROUND_TRIPS_ALLOWED * self.distance, self.settings.max_distance_allowance)

    def heartbeat(self, now: float) -> None:
        """The peer was heard from at ``now``."""
        if self._last is not None:
            self._add(max(0.0, now - self._last))
        self._last = now

    def restart(self, now: float) -> None:
        """Heard from again after an outage (a new connection): ``now`` is an arrival, but the outage is
        not an interval of the peer's usual pace."""
        self._last = now

    def quiet_for(self, now: float) -> float:
        """Seconds since the last arrival (0 before the first)."""
        return 0.0 if self._last is None else max(0.0, now - self._last)

    def phi(self, now: float) -> float:
        """The suspicion that the peer is gone, from 0 (heard from as expected); 0 before any arrival."""
        if self._last is None:
            return 0.0
        count = len(self._intervals)
        mean = self._sum / count
        std = max(math.sqrt(max(0.0, self._squares / count - mean * mean)), self.settings.min_std_deviation)
        y = (now - self._last - mean - self.settings.acceptable_pause - self.allowance) / std
        # -log10(1 - CDF(y)), with Akka's logistic approximation of the normal CDF, written so that no
        # exp overflows: log10(1 + e^z).
        z = y * (1.5976 + 0.070566 * y * y)
        if z > 0:
            return (z + math.log1p(math.exp(-z))) / _LN10
        return math.log1p(math.exp(z)) / _LN10

    def convicted(self, now: float) -> bool:
        """Whether the peer is taken for dead: phi reached the threshold."""
        return self.phi(now) >= self.settings.threshold

    def _add(self, interval: float) -> None:
        intervals = self._intervals
        if len(intervals) == self.settings.window:
            oldest = intervals.popleft()
            self._sum -= oldest
            self._squares -= oldest * oldest
        intervals.append(interval)
        self._sum += interval
        self._squares += interval * interval
