"""The result every solver returns: a Solution that explains itself (modelled on scipy's OptimizeResult).

A solver never returns a bare number. ``objective`` and ``peak_memory`` are the values the problem's
simulator recomputed when it replayed ``schedule``; ``predicted`` holds what the method itself
claimed (DP table value, MILP objective), so the two can be compared.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any


class Status(str, Enum):
    OPTIMAL = "optimal"              # proven optimal (within the method's model / discretization)
    FEASIBLE = "feasible"            # valid schedule, no optimality claim (heuristic) or gap > target
    TIME_LIMIT = "time_limit"        # stopped at the time limit: with the best schedule found, or none (nothing proven)
    INFEASIBLE = "infeasible"        # proven: no schedule fits; ``message`` says why
    NO_SOLUTION = "no_solution"      # the method found nothing (e.g. time limit before any incumbent)
    LIMIT_EXCEEDED = "limit_exceeded"  # a schedule the simulator replays, but above the memory limit
    #                                    (Checkmate's rounding): reported as replayed, not a plan for it
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


class InputError(ValueError):
    """Bad input to a ``solve`` call (an option out of range, a method that does not exist, a missing
    limit); the message names the input and says what would work. The command line prints it and
    exits with status 2."""


class InfeasibleError(ValueError):
    """No schedule fits the memory limit; ``minimum`` is the smallest limit that would work (bytes)."""

    def __init__(self, message: str, minimum: float | None = None):
        super().__init__(message)
        self.minimum = minimum


@dataclass(repr=False)
class Solution:
    """What a ``solve`` call answers. ``bound`` is proven for the schedules of the method's own class
    (rotor's memory-persistent sequences, revolve's AD model, the pipeline ILP's 1-periodic patterns;
    the message names it), so it may exceed another class's answer: compare methods by ``objective``.
    ``repr``/``str`` are one line (the schedule summarized, not dumped)."""

    problem: str
    method: str
    status: Status
    objective: float | None = None        # seconds, as replayed by the simulator
    peak_memory: float | None = None      # bytes, as replayed by the simulator
    schedule: Any = None                  # problem-specific schedule object (has .to_json())
    bound: float | None = None            # best proven lower bound on the objective in the method's class, if any
    memory_limit: float | None = None
    predicted: float | None = None        # the method's own value for the objective
    message: str = ""
    times: dict[str, float] = field(default_factory=dict)   # build / solve / total seconds
    details: dict[str, Any] = field(default_factory=dict)
    bandwidth: float | None = None        # bytes/s of the link the schedule uses (offloading, pipeline)
    gpus: int | None = None               # GPUs of a pipeline schedule
    instance: dict[str, Any] | None = None   # what it was solved on (:func:`instance_record`), if recorded

    def __repr__(self) -> str:
        from .units import fmt_memory, fmt_time

        sched = self.schedule
        if sched is not None:
            n = len(sched.ops) if hasattr(sched, "ops") else None
            sched = f"<{type(sched).__name__}{f', {n} operations' if n else ''}>"
        parts = [f"{self.problem}/{self.method}", f"status={self.status}",
                 f"objective={fmt_time(self.objective)}", f"peak_memory={fmt_memory(self.peak_memory)}",
                 f"memory_limit={fmt_memory(self.memory_limit)}"]
        if self.bound is not None:
            parts.append(f"bound={fmt_time(self.bound)}")
        parts.append(f"schedule={sched}")
        return "Solution(" + ", ".join(parts) + ")"

    __str__ = __repr__

    @property
    def success(self) -> bool:
        return self.status in (Status.OPTIMAL, Status.FEASIBLE, Status.TIME_LIMIT) and self.schedule is not None

    @property
    def gap(self) -> float | None:
        if self.objective is None or self.bound is None or self.objective == 0:
            return None
        return max(0.0, (self.objective - self.bound) / abs(self.objective))

    def to_dict(self) -> dict[str, Any]:
        sched = self.schedule
        if hasattr(sched, "to_json"):
            sched = sched.to_json()
        def clean(x):
            if isinstance(x, float) and not math.isfinite(x):
                return None
            if isinstance(x, dict):
                return {str(k): clean(v) for k, v in x.items()}
            if isinstance(x, (list, tuple)):
                return [clean(v) for v in x]
            if hasattr(x, "item") and not isinstance(x, (str, bytes)):
                try:
                    return clean(x.item())
                except (ValueError, AttributeError):
                    pass
            return x
        out = {
            "problem": self.problem, "method": self.method, "status": str(self.status),
            "objective": self.objective, "peak_memory": self.peak_memory, "memory_limit": self.memory_limit,
            "bandwidth": self.bandwidth, "gpus": self.gpus,
            "bound": self.bound, "gap": self.gap, "predicted": self.predicted, "message": self.message,
            "times": dict(self.times), "details": dict(self.details), "schedule": sched,
        }
        if self.instance is not None:     # optional: files without it read as before
            out["instance"] = dict(self.instance)
        return clean(out)

    @classmethod
    def from_dict(cls, data: dict[str, Any], read_schedule=None) -> "Solution":
        """The Solution :meth:`to_dict` wrote (a file of :meth:`write_json`, ``memplan solve --json``).
        ``read_schedule(problem, data)`` makes the schedule object again (:func:`memplan.load_solution`
        passes the problems' readers); without it the schedule stays the JSON written. A field of the
        wrong kind raises :class:`InputError` naming it."""
        if not isinstance(data, dict):
            raise InputError(f"a solution is a JSON object (as Solution.to_dict writes), not {type(data).__name__}")
        missing = [k for k in ("problem", "method", "status") if k not in data]
        if missing:
            raise InputError(f"a solution needs {', '.join(missing)} (as Solution.to_dict writes)")
        try:
            status = Status(data["status"])
        except ValueError:
            raise InputError(f"status {data['status']!r} is not one of {', '.join(s.value for s in Status)}") from None

        def number(key: str) -> float | None:
            v = data.get(key)
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise InputError(f"{key} = {v!r:.40} is not a number")
            if not math.isfinite(v):      # to_dict writes null for these: an edited file ('peak memory nan TiB')
                raise InputError(f"{key} = {v!r}: not a finite number (to_dict writes null where there is none)")
            return float(v)

        sched = data.get("schedule")
        if sched is not None and read_schedule is not None:
            try:
                sched = read_schedule(str(data["problem"]), sched)
            except (KeyError, TypeError, ValueError, IndexError) as e:
                raise InputError(f"schedule: not a {data['problem']} schedule as Solution.to_dict writes it "
                                 f"({type(e).__name__}: {e})") from None
        for key in ("times", "details"):
            if not isinstance(data.get(key, {}), dict):
                raise InputError(f"{key} is not a JSON object")
        gpus = data.get("gpus")
        return cls(problem=str(data["problem"]), method=str(data["method"]), status=status,
                   objective=number("objective"), peak_memory=number("peak_memory"), schedule=sched,
                   bound=number("bound"), memory_limit=number("memory_limit"), predicted=number("predicted"),
                   message=str(data.get("message", "")), times=dict(data.get("times") or {}),
                   details=dict(data.get("details") or {}), bandwidth=number("bandwidth"),
                   gpus=int(gpus) if isinstance(gpus, (int, float)) and not isinstance(gpus, bool) else None,
                   instance=dict(data["instance"]) if isinstance(data.get("instance"), dict) else None)

    def write_json(self, path: str | Path) -> None:
        """Write :meth:`to_dict` as JSON; a path that cannot be written raises :class:`InputError`
        naming it, ``cannot write PATH: REASON`` (a folder, a missing or read-only folder, a full disk),
        as every file the command line writes."""
        text = json.dumps(self.to_dict(), indent=1) + "\n"
        try:
            Path(path).write_text(text)
        except OSError as e:
            raise InputError(f"cannot write {path}: {e.strerror or e}") from None


def chain_fingerprint(chain) -> str:
    """sha256 (hex) of everything about ``chain`` a solver plans with: every per-stage array (the
    optional ones as the chain resolves them), ``u_turn`` and ``resident``, as float64 bytes. Its name,
    stage names and provenance are left out: renaming an instance does not change its plans. Two loads
    of one instance file give the same fingerprint (the file's numbers parse to the same floats)."""
    import numpy as np

    h = hashlib.sha256()
    for key in ("uf", "ub", "wa", "wabar", "wd", "of", "ob", "weights", "of_all", "of_ng", "ufn"):
        h.update(key.encode() + b"=")
        h.update(np.ascontiguousarray(np.asarray(getattr(chain, key), dtype="<f8")).tobytes())
    h.update(np.asarray([chain.u_turn, chain.resident], dtype="<f8").tobytes())
    return h.hexdigest()


def instance_record(chain, file: str | Path | None = None) -> dict[str, Any]:
    """What :attr:`Solution.instance` records of the instance a solution was solved on: the chain's
    ``name``, ``L`` and :func:`chain_fingerprint` (``sha256``), and the ``file`` it was read from when
    given. ``memplan run`` compares it with the instance it is asked to run the solution on: a plan
    solved on another chain replays to another peak, over the limit it was solved for."""
    rec: dict[str, Any] = {"name": chain.name, "L": int(chain.L), "sha256": chain_fingerprint(chain)}
    if file is not None:
        rec["file"] = str(file)
    return rec
