"""The time budget of one ``solve`` call, and the progress lines it prints.

A problem's ``solve(..., time_limit=T)`` promises to return within about ``T`` seconds, every phase
included (baselines, MIP starts, refinement, the MILP itself, the final replay). The front end opens a
:class:`Budget` for the call and activates it; the phases below it ask the active budget how much
time is left instead of each taking the full ``T``:

* :func:`formulations.highs_driver.solve_milp` clamps HiGHS's time limit to what is left once the
  model is compiled, and reports each improving incumbent as a progress line;
* loops over many candidates (PipeDream's sweep, partition searches, refinement steps) stop early
  when :meth:`Budget.expired` says so and keep what they have.

The active budget is held in a :mod:`contextvars` variable rather than passed through every
signature: the algorithms keep their plain ``time_limit`` arguments (which remain per-call caps), and
a budget only ever *shortens* them. Outside any ``solve`` call there is no active budget and nothing
is clamped.

Progress goes to a callable taking one line (the command line prints it to stderr, ``--quiet``
silences it; library calls are silent unless given ``progress=print`` or similar).

>>> b = Budget(10.0)
>>> b.limit(60.0) <= 10.0
True
>>> Budget(None).limit(60.0)
60.0
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import time
from typing import Callable, Iterator

ProgressFn = Callable[[str], None]

#: :meth:`Budget.pace` is 1 before a call has run this long (seconds)
PACE_MIN_SECONDS = 0.05
#: and never more than this (a call that waited on something else than the CPU)
PACE_MAX = 10.0

_ACTIVE: contextvars.ContextVar["Budget | None"] = contextvars.ContextVar("memplan_budget", default=None)


class Budget:
    """A deadline (``time_limit`` seconds from now; None: no limit) and a progress sink.

    Parameters
    ----------
    time_limit : float or None
        Seconds the whole call may take.
    progress : callable or None
        Receives one line per event worth showing (phase done, incumbent improved).
    """

    def __init__(self, time_limit: float | None = None, progress: ProgressFn | None = None):
        if time_limit is not None and not (time_limit > 0 and math.isfinite(time_limit)):
            raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
        self.start = time.monotonic()
        self.cpu_start = time.process_time()
        self.time_limit = time_limit
        self.deadline = math.inf if time_limit is None else self.start + float(time_limit)
        self.progress = progress

    # ------------------------------------------------------------------ time
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def remaining(self) -> float:
        """Seconds left (``inf`` without a limit; never negative)."""
        return max(0.0, self.deadline - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def pace(self) -> float:
        """Wall seconds per second of CPU this process got since the call began (at least 1): how
        much slower than measured on a quiet machine a step that cannot be interrupted (an import, a
        model's compilation) is likely to run now. 1 until :data:`PACE_MIN_SECONDS` have passed (too
        short to tell) and in a call without a time limit, and never above :data:`PACE_MAX`. A process
        whose other threads work (HiGHS's) gets more CPU than wall time: 1 then too.

        On the 2-core machine of the tests, beside two busy loops: 3.0 (a pure-Python loop took 1.49 s
        there, 0.49 s alone).
        """
        wall = time.monotonic() - self.start
        if self.time_limit is None or wall < PACE_MIN_SECONDS:
            return 1.0
        cpu = time.process_time() - self.cpu_start
        return min(PACE_MAX, max(1.0, wall / max(cpu, 1e-3)))

    def limit(self, cap: float | None = None, share: float = 1.0) -> float | None:
        """The time limit to give the next phase: ``share`` of what is left, at most ``cap``.

        None when there is neither a budget nor a cap.
        """
        left = self.remaining() * share
        if cap is None:
            return None if math.isinf(left) else left
        return min(float(cap), left)

    # ------------------------------------------------------------------ progress
    def log(self, message: str) -> None:
        """Send ``[elapsed] message`` to the progress sink, if any."""
        if self.progress is not None:
            self.progress(f"[{self.elapsed():7.1f}s] {message}")

    # ------------------------------------------------------------------ activation
    @contextlib.contextmanager
    def active(self) -> Iterator["Budget"]:
        """Make this the budget that :func:`current` returns inside the ``with`` block."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)


_UNLIMITED = Budget(None)


def current() -> Budget:
    """The budget of the ``solve`` call in progress (an unlimited, silent one outside any call)."""
    return _ACTIVE.get() or _UNLIMITED


def clamp(time_limit: float | None) -> float | None:
    """``time_limit`` shortened to what the active budget has left (unchanged without a budget)."""
    return current().limit(time_limit)


def note(message: str) -> None:
    """A progress line to the active budget's sink (nothing outside a ``solve`` call)."""
    current().log(message)
