"""Timings you can trust: contenders run in alternation until each median is known to a stated
precision, with a distribution-free confidence interval.

A median of 5 runs is not enough on a shared machine or a GPU whose clocks move: two segment counts
of ``checkpoint_sequential`` with the same peak came out 1.35x apart on an H200. :func:`interleaved`
runs every contender once per *round*, in an order that rotates from round to round (so a slow
period of the machine falls on all of them alike, not on whoever ran then), and stops when the 95%
interval of every contender's median lies within ``target`` of that median, or at ``max_rounds``,
or when ``budget`` seconds are spent; a contender whose interval is still wider is marked ``noisy``.

The interval of the median (:func:`median_interval`) uses order statistics: for n independent runs,
the number of runs below the true median is Binomial(n, 1/2), so ``[x_(j), x_(n+1-j)]`` (1-based,
sorted) covers it with probability ``1 - 2 P(Bin(n, 1/2) <= j - 1)``; j is the largest index that
keeps this at least the level. No normality is assumed: run times are skewed (interruptions only make
a run slower).

Two contenders are compared round by round (:func:`paired_ratio`): the median of the per-round ratios
and its interval, the same order statistics, which cancels what a slow round did to both.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable


#: clocks a CPU measurement may use: ``wall`` (time.perf_counter, what a user waits) and ``cpu``
#: (time.process_time: the CPU time of this process, every thread summed). With one torch thread the
#: two agree on an idle machine, and ``cpu`` stays put on a shared one, where other processes stretch
#: the wall clock of whoever they interrupt (seen here on 2 cores with 4 busy processes: store-all
#: of a small ResNet-18 over 12 runs spread 37-112 ms on the wall clock, 37-50 ms on the CPU clock).
#: With several torch threads ``cpu`` counts each thread's time and is not a wall time: refuse it.
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def clock(name: str, threads: int = 1):
    """The function of clock ``name`` (see :data:`CLOCKS`); ``cpu`` only with one thread."""
    if name not in CLOCKS:
        raise ValueError(f"clock {name!r}: choose from {', '.join(CLOCKS)}")
    if name == "cpu" and threads != 1:
        raise ValueError(f"clock 'cpu' sums the CPU time of every thread; with {threads} torch threads it is not a "
                         "step's duration: use one thread (torch.set_num_threads(1)) or the wall clock")
    return CLOCKS[name]


#: a timed sample on a GPU lasts at least this long (several steps back to back, :func:`steps_per_sample`)
SAMPLE_SECONDS = 0.1
#: and holds at most this many steps
MAX_SAMPLE_STEPS = 10


def steps_per_sample(step_seconds: float) -> int:
    """Steps run back to back in one timed sample on a GPU: enough for :data:`SAMPLE_SECONDS` of a step
    of ``step_seconds``, :data:`MAX_SAMPLE_STEPS` at most, 1 at least. A short GPU step timed alone
    spreads with the CPU's launch jitter (one ResNet-50 step of 20 ms on an H100: 14% from the 5th to
    the 95th percentile alone, 1.5% as the mean of 5, ``benchmarks/results/timing_noise_gpu.csv``)."""
    if not step_seconds > 0:
        return 1
    return int(min(MAX_SAMPLE_STEPS, max(1, math.ceil(SAMPLE_SECONDS / step_seconds))))


def mean_of_steps(fn: Callable[[], None], steps: int, *, sync: Callable[[], None] = lambda: None,
                  clock: Callable[[], float] = time.perf_counter,
                  before: Callable[[], None] | None = None) -> Callable[[], float]:
    """A contender for :func:`interleaved`: ``before()`` (e.g. clearing the gradients), then ``steps``
    runs of ``fn`` back to back between two ``sync()`` (a CUDA synchronize), timed on ``clock``;
    returns their mean in seconds."""
    def once() -> float:
        if before is not None:
            before()
        sync()
        t0 = clock()
        for _ in range(steps):
            fn()
        sync()
        return (clock() - t0) / steps
    return once


def median_interval(xs: list[float], level: float = 0.95) -> tuple[float, float]:
    """Distribution-free ``level`` confidence interval of the median of ``xs`` (see the module
    docstring). With too few values for that level (n < 6 at 95%) it is ``(min, max)``, whose
    coverage is lower than asked: callers require enough rounds.

    >>> median_interval([float(v) for v in range(1, 11)])     # n = 10: x_(2), x_(9), 97.9% coverage
    (2.0, 9.0)
    """
    from scipy.stats import binom

    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError("median_interval: no values")
    alpha = (1.0 - level) / 2
    j = 0
    while j + 1 <= n // 2 and binom.cdf(j, n, 0.5) <= alpha:     # P(Bin <= (j+1) - 1) <= alpha
        j += 1
    if j == 0:
        return s[0], s[-1]
    return s[j - 1], s[n - j]


@dataclass
class Ratio:
    """A paired comparison of two contenders timed in the same rounds (:func:`paired_ratio`):
    ``median`` of the per-round ratios a/b, ``low``/``high`` the 95% interval of that median, ``n``
    rounds. ``a`` is shown slower than ``b`` when ``low > 1``, faster when ``high < 1``."""

    median: float
    low: float
    high: float
    n: int

    @property
    def shown_slower(self) -> bool:
        return self.low > 1.0

    @property
    def shown_faster(self) -> bool:
        return self.high < 1.0

    def text(self, digits: int = 3) -> str:
        return f"{self.median:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def paired_ratio(a: list[float], b: list[float], level: float = 0.95) -> Ratio:
    """The time of contender ``a`` over contender ``b``, round by round: ``a[i] / b[i]`` for the
    rounds i of :func:`interleaved` (both timed in round i, a few seconds apart at most), their median
    and its distribution-free ``level`` interval (:func:`median_interval`; the rounds are taken as
    independent draws of the ratio).

    Why pairing: a slow period of the machine stretches every contender of the rounds it falls on.
    Two medians taken apart keep that spread in both intervals; the ratio within a round cancels the
    part both runs shared. On an H100 (ResNet-50 b32, 24 rounds, ``runtime_traces_resnet50_2026-11-27.json``)
    memplan's store-all over plain autograd was 1.012 with the two medians' intervals giving
    [0.954, 1.135], and 1.018 [1.003, 1.042] paired: the same data, a verdict instead of a shrug.
    Rounds where either time is missing or not positive are left out."""
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None and x > 0 and y > 0
             and math.isfinite(x) and math.isfinite(y)]
    if not pairs:
        raise ValueError("paired_ratio: no round has both times")
    r = [x / y for x, y in pairs]
    lo, hi = median_interval(r, level)
    return Ratio(statistics.median(r), lo, hi, len(r))


@dataclass
class Timing:
    """One contender's times (seconds) and what they say: ``median``, the interval ``low``/``high``
    of the median, ``rel_halfwidth`` = max(median - low, high - median) / median, ``noisy`` when it
    is above the target."""

    name: str
    times: list[float] = field(default_factory=list)
    median: float = float("nan")
    low: float = float("nan")
    high: float = float("nan")
    rel_halfwidth: float = float("inf")
    noisy: bool = True

    def update(self, target: float, level: float) -> None:
        self.median = statistics.median(self.times)
        self.low, self.high = median_interval(self.times, level)
        self.rel_halfwidth = (max(self.median - self.low, self.high - self.median) / self.median
                              if self.median > 0 else 0.0)
        self.noisy = self.rel_halfwidth > target


def interleaved(contenders: dict[str, Callable[[], float | None]], *, target: float = 0.02,
                level: float = 0.95, min_rounds: int = 8, max_rounds: int = 60, budget: float | None = None,
                progress: Callable[[str], None] | None = None, floor: int = 2) -> dict[str, Timing]:
    """Time ``contenders`` (name -> a function that runs once and returns its own time in seconds,
    or None to be timed here with ``time.perf_counter`` around the call) in rotating rounds; see the
    module docstring. ``min_rounds`` >= 6 so that the 95% interval exists. ``budget``: seconds after
    which no new round starts (at least ``min_rounds`` are run only while the budget allows; the
    contenders are then reported ``noisy`` if their interval is still wide). ``floor``: rounds run
    whatever the budget (6 gives every median a 95% interval: :func:`median_interval`)."""
    names = list(contenders)
    out = {n: Timing(n) for n in names}
    if not names:
        return out
    t0 = time.perf_counter()
    rounds = 0
    while rounds < max_rounds:
        k = rounds % len(names)
        for name in names[k:] + names[:k]:
            s = time.perf_counter()
            got = contenders[name]()
            out[name].times.append(float(got) if got is not None else time.perf_counter() - s)
        rounds += 1
        if rounds >= 2:
            for t in out.values():
                t.update(target, level)
        if rounds >= min_rounds and not any(t.noisy for t in out.values()):
            break
        if budget is not None and time.perf_counter() - t0 > budget and rounds >= max(2, floor):
            break
    for t in out.values():
        if len(t.times) < 2:
            t.update(target, level)
    if progress is not None:
        wide = [t.name for t in out.values() if t.noisy]
        progress(f"timed {len(names)} contenders in {rounds} rounds ({time.perf_counter() - t0:.1f} s)"
                 + (f"; still noisy (95% interval of the median wider than {target:.0%}): {', '.join(wide)}"
                    if wide else ""))
    return out
