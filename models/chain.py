"""The chain and platform data model shared by all four problems.

A chain has stages ``1..L`` (forward ``F^l``, backward ``B^l``) plus the loss as stage ``L+1``
(papers 002/004: the loss is the pair of operations ``F^{L+1}``, ``B^{L+1}``). Every per-stage
array uses the papers' indexing directly, so ``chain.uf[l]`` is ``u_f^l``:

================  ===========  =====================================================================
array             indices      meaning (paper 004, Table 1 and section 3.1)
================  ===========  =====================================================================
``uf``, ``ub``    1..L+1       forward / backward time of stage l (seconds); index 0 is unused (0)
``uf_ng``         1..L+1       the no-grad forward's (F_ck^l, F_none^l) own time (optional; default ``uf``)
``of``, ``ob``    1..L+1       memory overhead of F^l / B^l beyond inputs and outputs (bytes)
``of_all``        1..L+1       F_all^l's own forward overhead (default ``of``; a larger value is lowered to it)
``of_ng``         1..L+1       the no-grad forward's (F_ck^l, F_none^l) own overhead (likewise)
``wa``            0..L+1       size of the activation a^l (output of F^l); ``wa[0]`` is the input
``wabar``         0..L+1       size of abar^l, everything autograd keeps for B^l (contains a^l)
``wd``            0..L+1       size of the gradient delta^l = dLoss/da^l (usually equal to ``wa``)
``weights``       1..L+1       parameter bytes W^l of stage l (pipeline and offload problems)
================  ===========  =====================================================================

The papers' model has one forward overhead ``o_f`` for F_all and the no-grad forwards (F_ck, F_none).
The two differ in practice (an attention stage's no-grad forward keeps a transient 26 times F_all's on a
small GPT-2), so the chain keeps each forward's own: ``of_all`` for F_all, ``of_ng`` for F_ck and
F_none. Every simulator charges them, and every solver (DPs, MILPs, bounds, heuristics) plans with them,
so a plan that fits only because F_all's own overhead is small is found, and the replay's peak is what
the executors hold (to the byte on the CPU). ``of`` is the profiler's larger of the two and the default
of both: where they are not given, they equal ``of`` and the model is the papers' exactly.
``simulate_remat(..., one_overhead=True)`` charges ``of`` for every forward, the papers' replay.
A copy made with ``dataclasses.replace(chain, of=x)`` lowers ``of_all`` and ``of_ng`` to at most ``x``
(a relaxation stays one) but never raises them: pass ``of_all=`` and ``of_ng=`` too to raise them.

Times in context (issue 27, item 3). ``uf`` is F_all's time and, in the papers' model, every
forward's. On a CPU a no-grad forward took 1-12% less than F_all (no tape to record), and every
*turn*, a backward step followed by a forward (the backward call stops, forwards run, another
backward call starts), cost up to 180 us more than the same operations in store-all's step
(``benchmarks/time_model_turns.py``): a re-materialization plan of a 5-8 ms step was then up to
6.9% slower than its makespan. The chain may carry both: ``uf_ng`` (default ``uf``: the attribute
is None, and :attr:`ufn` reads ``uf``) and ``u_turn`` (a scalar, seconds per turn, default 0).
:func:`memplan.models.remat.simulate_remat` charges them, and the persistent DP and the baselines'
compiled replay plan with them; :meth:`papers_times` is the chain without them (what
:func:`memplan.remat.solve` gives the methods that do not model them); :attr:`own_times` says whether
a chain has them. The joint and offloading problems keep the papers' times.
``dataclasses.replace(chain, uf=x)`` keeps ``uf_ng`` where it was given: pass ``uf_ng=`` too.

For the loss stage L+1, ``wa[L+1]``, ``wabar[L+1]`` and ``wd[L+1]`` are the (usually zero) sizes of
the loss value and of delta^{L+1} = 1.

``resident`` (a scalar, bytes, default 0): tensors that cross two or more stage boundaries of a
multi-tensor linearization (issue 30: a NASNet cell's output read two cells later, an encoder's output
read by every decoder layer, a U-Net skip) and their gradients. They are not in any ``wa[l]``; the
executor holds them from their creation until the backward step of the stage that produced them (some
less: ``resident_values`` below), and every problem charges them once, for the whole step (the
re-materialization simulator only the parts whose lifetimes the chain does not give): the simulators add ``resident`` to every memory
value and the front ends solve the chain without it under ``memory - resident`` (see
:func:`models.graph.residency` for the model and why it is an upper bound of what is held).
``resident_grads`` (optional, since 2026-11-29): the gradients inside ``resident``, one
``(bytes, k, r)`` per resident float tensor produced by stage k (0: the input) and read last by stage
r > k. The executor allocates such a gradient when the first of its readers' backward steps hands a
contribution (in B^r, the backward runs from the last stage down) and frees it when B^k ends (k = 0:
at the end of the step), as autograd does; :func:`models.remat.simulate_remat` charges it from the
end of B^r (inside B^r it is in ``ob[r]``, measured so) to the end of B^k, and the solvers, which
charge ``resident`` whole, plan an upper bound.
``resident_values`` (optional, since 2026-11-29): values inside ``resident`` whose storage no other
tensor shares (:func:`models.graph.resident_lifetimes`), one ``(bytes, k, readers)`` each, charged by
:func:`models.remat.simulate_remat` only while they live, from the end of a forward of stage k that
makes one (inside that forward it is in ``of``, measured so). ``readers`` (the stages r > k that read
it) for a value no backward saves (a NASNet cell's output, read by the next two cells' ReLUs):
autograd frees it once its last reader's forward has run, and so does the executor (it keeps the
gradient for B^k through the value's state, not the value): it is charged up to the end of the
forward after which no reader runs a forward before stage k's next one
(:func:`models.remat.value_drops`, which the executor follows too). ``readers = ()`` for one that a
backward saves: charged up to the end of B^k. A resident value not listed is charged for the whole
step. The solvers, again, plan with ``resident`` whole.

Units inside the code: bytes and seconds, always floats. Every entry must be finite and within
``[0, MAX_BYTES]`` (sizes, 1 PB) or ``[0, MAX_SECONDS]`` (times, 1e6 s): ranges no real network
reaches, so a larger value is a mistake (a unit slip, a corrupted file) and is refused with a
``ValueError`` naming the array and the index (``Chain.wa[3] = 1e+300 is out of range: ...``).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .units import UnitError, did_you_mean, parse_bandwidth, parse_memory


#: the per-stage arrays of a :class:`Chain`
_ARRAYS = ("uf", "ub", "wa", "wabar", "wd", "of", "ob", "weights")
#: each forward's own overhead (optional arrays, default ``of``; see the module docstring)
_OWN_OVERHEADS = ("of_all", "of_ng")
#: the keys of :meth:`Chain.from_stages`'s ``loss`` (the loss stage L+1's values)
_LOSS_KEYS = ("uf", "ub", "of", "ob", "wa", "wabar", "wd", "of_all", "of_ng", "uf_ng", "weights")

#: Largest accepted size (bytes): 1 PB, far beyond any device or host memory a network is trained in.
MAX_BYTES = 1e15
#: Largest accepted time (seconds): 1e6 s (11.6 days) for one forward or backward step of one stage.
MAX_SECONDS = 1e6
#: Largest accepted bandwidth (bytes/s): 1 PB/s.
MAX_BANDWIDTH = 1e15
#: Largest accepted number of GPUs.
MAX_GPUS = 1_000_000

_RANGE_TEXT = {"size": f"sizes must be between 0 and {MAX_BYTES:g} bytes (1 PB)",
               "time": f"times must be between 0 and {MAX_SECONDS:g} s"}
_RANGE_MAX = {"size": MAX_BYTES, "time": MAX_SECONDS}
#: the limits are inclusive up to the rounding of a unit conversion (1e15 ns * 1e-9 = 1.0000000000000002e6 s)
RANGE_TOLERANCE = 1 + 1e-12


def check_range(values, what: str, kind: str) -> None:
    """Raise ``ValueError`` naming ``what[i]`` for the first entry of ``values`` that is not a finite
    number in ``[0, MAX_BYTES]`` (``kind="size"``, bytes) or ``[0, MAX_SECONDS]`` (``kind="time"``,
    seconds): NaN, infinities, negative values and absurd magnitudes (a size of 1e300 B) are refused
    with the accepted range.

    >>> check_range([1.0, 2e300], "Chain.wa", "size")
    Traceback (most recent call last):
    ...
    ValueError: Chain.wa[1] = 2e+300 is out of range: sizes must be between 0 and 1e+15 bytes (1 PB)
    """
    arr = np.asarray(values, dtype=float).reshape(-1)
    bad = ~np.isfinite(arr) | (arr < 0) | (arr > _RANGE_MAX[kind] * RANGE_TOLERANCE)
    if np.any(bad):
        i = int(np.argmax(bad))
        raise ValueError(f"{what}[{i}] = {arr[i]:g} is out of range: {_RANGE_TEXT[kind]}")


@dataclass
class Platform:
    """Where a chain is trained: device memory (bytes), host link bandwidth (bytes/s), GPU count.
    Memory and bandwidth may be strings with units, as everywhere in the API (``"80GiB"``,
    ``"12GB/s"``)."""

    memory: float | None = None
    bandwidth: float | None = None
    gpus: int = 1
    name: str = ""

    def __post_init__(self) -> None:
        for key, limit, unit in (("memory", MAX_BYTES, "bytes"), ("bandwidth", MAX_BANDWIDTH, "bytes/s")):
            v = getattr(self, key)
            if v is None:
                continue
            if isinstance(v, str):
                try:
                    v = (parse_memory if key == "memory" else parse_bandwidth)(v)
                except UnitError as e:
                    raise ValueError(f"Platform.{key} = {v!r}: {e}") from None
            number = isinstance(v, (int, float, np.number)) and not isinstance(v, bool)
            if not number or not 0 < v <= limit * RANGE_TOLERANCE:
                raise ValueError(f"Platform.{key} = {v!r} is out of range: give a positive number of {unit} "
                                 f"up to {limit:g}, or None when unknown")
            setattr(self, key, float(v))
        g = self.gpus
        if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or not 1 <= g <= MAX_GPUS:
            raise ValueError(f"Platform.gpus = {g!r} is out of range: give a whole number between 1 and {MAX_GPUS}")
        self.gpus = int(g)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _optional_array(v, name: str, n: int, kind: str):
    """``Chain.<name>`` as a float array of ``n`` entries in range, index 0 set to 0; None stays None."""
    if v is None:
        return None
    try:
        arr = np.array(v, dtype=float)
    except (TypeError, ValueError) as e:
        raise ValueError(f"Chain.{name} must be an array of numbers ({e})") from None
    if arr.shape != (n,):
        raise ValueError(f"Chain.{name} has shape {arr.shape}, expected ({n},) = L+2 entries")
    check_range(arr, f"Chain.{name}", kind)
    arr[0] = 0.0
    return arr


def _resident_grads(v, L: int, resident: float) -> tuple:
    """:attr:`Chain.resident_grads` as a tuple of ``(bytes, k, r)``, ``0 <= k < r <= L + 1``, their
    bytes within ``resident`` (a ValueError naming the entry otherwise)."""
    out = []
    for i, e in enumerate(v or ()):
        try:
            g, k, r = float(e[0]), int(e[1]), int(e[2])
        except (TypeError, ValueError, IndexError):
            raise ValueError(f"Chain.resident_grads[{i}] = {e!r}: give (bytes, producer stage k, last reader r)") from None
        check_range([g], f"Chain.resident_grads[{i}]", "size")
        if not 0 <= k < r <= L + 1:
            raise ValueError(f"Chain.resident_grads[{i}] = {e!r}: need 0 <= k < r <= L + 1 = {L + 1}")
        out.append((g, k, r))
    total = sum(g for g, _, _ in out)
    if total > resident * (1 + 1e-6) + 1.0:       # (an instance file's rounding)
        raise ValueError(f"Chain.resident_grads: {total:g} bytes of gradients, more than resident = {resident:g}")
    return tuple(out)


def _resident_values(v, L: int, resident: float, grads: tuple) -> tuple:
    """:attr:`Chain.resident_values` as a tuple of ``(bytes, k, readers)``, ``1 <= k < r <= L + 1`` for
    every reader r (a tuple of distinct stages, sorted; empty: kept until B^k), their bytes and the
    gradients' within ``resident`` (a ValueError naming the entry otherwise)."""
    out = []
    for i, e in enumerate(v or ()):
        try:
            b, k, rs = float(e[0]), int(e[1]), tuple(sorted({int(r) for r in e[2]}))
            if (len(e) != 3 or k != e[1] or len(rs) != len(e[2]) or any(int(r) != r for r in e[2])
                    or any(isinstance(u, bool) for u in (e[1], *e[2]))):
                raise ValueError
        except (TypeError, ValueError, IndexError):
            raise ValueError(f"Chain.resident_values[{i}] = {e!r}: give (bytes, producer stage k, "
                             "[reader stages])") from None
        check_range([b], f"Chain.resident_values[{i}]", "size")
        if not 1 <= k <= L or (rs and (rs[0] <= k or rs[-1] > L + 1)):
            raise ValueError(f"Chain.resident_values[{i}] = {e!r}: need 1 <= k < r <= L + 1 = {L + 1} "
                             "for every reader r")
        out.append((b, k, rs))
    total = sum(b for b, _, _ in out) + sum(g for g, _, _ in grads)
    if total > resident * (1 + 1e-6) + 1.0:       # (an instance file's rounding)
        raise ValueError(f"Chain.resident_values: {total:g} bytes of values and gradients, more than "
                         f"resident = {resident:g}")
    return tuple(out)


def _scalar(v, name: str, kind: str, what: str) -> float:
    """``Chain.<name>`` as a float in range (``kind``: size or time), else a ValueError saying ``what``."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.number)):
        raise ValueError(f"Chain.{name} = {v!r} must be {what}")
    if not (np.isfinite(v) and 0 <= v <= _RANGE_MAX[kind] * RANGE_TOLERANCE):
        raise ValueError(f"Chain.{name} = {v:g} is out of range: {_RANGE_TEXT[kind]}")
    return float(v)


@dataclass(eq=False)
class Chain:
    """A chain of L stages with its loss stage L+1 (see the module docstring for the arrays)."""

    def __eq__(self, other: object) -> bool:
        """Field by field, arrays element by element (the generated ``__eq__`` compared arrays as
        truth values and raised). Unhashable, as a mutable dataclass is."""
        if not isinstance(other, Chain):
            return NotImplemented
        for f in dataclasses.fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
                if a is None or b is None or not np.array_equal(a, b):
                    return False
            elif a != b:
                return False
        return True

    __hash__ = None   # type: ignore[assignment]

    uf: np.ndarray
    ub: np.ndarray
    wa: np.ndarray
    wabar: np.ndarray
    wd: np.ndarray
    of: np.ndarray
    ob: np.ndarray
    weights: np.ndarray
    name: str = "chain"
    stage_names: list[str] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)
    resident: float = 0.0
    of_all: Any = None       # F_all^l's own forward overhead (default: of), at most of
    of_ng: Any = None        # the no-grad forward's own overhead (default: of), at most of
    uf_ng: Any = None        # the no-grad forward's own time (default None: uf's)
    u_turn: float = 0.0      # seconds per turn (a B followed by a forward)
    resident_grads: Any = ()  # ((bytes, k, r), ...): resident gradients' lifetimes (module docstring)
    resident_values: Any = ()  # ((bytes, k, readers), ...): unsaved resident values' (module docstring)

    # ------------------------------------------------------------------ construction
    def __post_init__(self) -> None:
        for f in _ARRAYS:
            try:
                setattr(self, f, np.asarray(getattr(self, f), dtype=float))
            except (TypeError, ValueError) as e:
                raise ValueError(f"Chain.{f} must be an array of numbers ({e})") from None
        n = len(self.wa)
        if n < 3:
            # L = 0 (the input and the loss alone) has nothing to schedule; every problem's methods
            # assume one stage at least (they crashed on it with index and division errors)
            raise ValueError(f"a chain needs at least one stage besides the loss (L >= 1: len(wa) >= 3, got {n})")
        for f in _ARRAYS:
            arr = getattr(self, f)
            if arr.shape != (n,):
                raise ValueError(f"Chain.{f} has shape {arr.shape}, expected ({n},) = L+2 entries")
            check_range(arr, f"Chain.{f}", "time" if f in ("uf", "ub") else "size")
        for f in ("uf", "ub", "of", "ob", "weights"):
            getattr(self, f)[0] = 0.0
        for f in _OWN_OVERHEADS:
            arr = _optional_array(getattr(self, f), f, n, "size")
            # at most of (the larger of the two): a copy whose of was lowered (a relaxation,
            # dataclasses.replace(chain, of=...)) lowers them with it; instance files refuse a larger one
            setattr(self, f, self.of.copy() if arr is None else np.minimum(arr, self.of))
        self.uf_ng = _optional_array(self.uf_ng, "uf_ng", n, "time")
        self.u_turn = _scalar(self.u_turn, "u_turn", "time", "a number of seconds (0: a turn costs nothing more)")
        self.resident = _scalar(self.resident, "resident", "size",
                                "a number of bytes (0 when no tensor crosses two cuts)")
        self.resident_grads = _resident_grads(self.resident_grads, n - 2, self.resident)
        self.resident_values = _resident_values(self.resident_values, n - 2, self.resident, self.resident_grads)
        if not self.stage_names:
            self.stage_names = ["input"] + [f"stage{l}" for l in range(1, n - 1)] + ["loss"]
        else:
            # one name per row 0..L+1, each a string: a short list made save_instance fail with a bare
            # IndexError, and numbers were written to a file that load_instance then refused
            names = self.stage_names
            if isinstance(names, (str, bytes)) or not hasattr(names, "__len__"):
                raise ValueError(f"Chain.stage_names = {names!r:.60} must be a list of L+2 = {n} names "
                                 "(input, stages 1..L, loss)")
            if len(names) != n:
                raise ValueError(f"Chain.stage_names has {len(names)} names, expected L+2 = {n} (input, stages "
                                 "1..L, loss); leave it out for input, stage1.., loss")
            for i, name in enumerate(names):
                if not isinstance(name, str):
                    raise ValueError(f"Chain.stage_names[{i}] = {name!r:.40} is not a string")
            self.stage_names = list(names)

    @classmethod
    def from_stages(
        cls,
        uf, ub, wa, wabar=None, wd=None, of=None, ob=None, weights=None, *,
        loss: dict[str, float] | None = None, name: str = "chain", of_all=None, of_ng=None, uf_ng=None, **kw,
    ) -> "Chain":
        """Build from per-stage lists for stages 1..L (``uf``, ``ub``, ``of``, ``ob``, ``weights`` and,
        where given, ``of_all``, ``of_ng``, ``uf_ng``: L values) and activations a^0..a^L (``wa``,
        ``wabar``, ``wd``: L+1 values). The loss stage L+1 takes the values in ``loss`` (keys uf, ub, of,
        ob, wa, wabar, wd, of_all, of_ng, uf_ng, weights; all default to 0, of_all and of_ng to the loss's
        of, uf_ng to the loss's uf; another key is an error naming the closest).

        >>> c = Chain.from_stages(uf=[1, 2], ub=[2, 3], wa=[4, 5, 6])
        >>> c.L, c.uf.tolist(), c.wa.tolist()
        (2, [0.0, 1.0, 2.0, 0.0], [4.0, 5.0, 6.0, 0.0])
        """
        for key, v in (("uf", uf), ("ub", ub), ("wa", wa)):
            if isinstance(v, (str, bytes)) or not hasattr(v, "__len__"):
                raise ValueError(f"Chain.from_stages: {key} = {v!r:.40} must be a list of numbers "
                                 f"({'a^0..a^L' if key == 'wa' else 'stages 1..L'})")
        L = len(uf)
        if loss is not None and not isinstance(loss, Mapping):
            raise ValueError(f"Chain.from_stages: loss = {loss!r:.40} must be a dict of the loss stage's values "
                             f"(keys {', '.join(_LOSS_KEYS)})")
        loss = dict(loss or {})
        for key, v in loss.items():
            # a misspelt key ({"uff": 1}) was ignored: the loss then cost nothing, silently
            if key not in _LOSS_KEYS:
                raise ValueError(f"Chain.from_stages: loss has no key {key!r}{did_you_mean(key, _LOSS_KEYS)}"
                                 f"; its keys: {', '.join(_LOSS_KEYS)}")
            if isinstance(v, bool) or not isinstance(v, (int, float, np.number)):
                raise ValueError(f"Chain.from_stages: loss[{key!r}] = {v!r:.40} must be a number (seconds or bytes)")
        wa = list(wa)
        if len(wa) != L + 1:
            raise ValueError(f"wa needs L+1 = {L + 1} values (a^0..a^L), got {len(wa)}")

        def stage(x, key):
            x = [0.0] * L if x is None else list(x)
            if len(x) != L:
                raise ValueError(f"{key} needs L = {L} values (stages 1..L), got {len(x)}")
            return [0.0] + x + [float(loss.get(key, 0.0))]

        def act(x, key, default):
            x = list(default) if x is None else list(x)
            if len(x) != L + 1:
                raise ValueError(f"{key} needs L+1 = {L + 1} values (indices 0..L), got {len(x)}")
            return x + [float(loss.get(key, 0.0))]

        for key in ("of_all", "of_ng"):
            loss.setdefault(key, loss.get("of", 0.0))
        loss.setdefault("uf_ng", loss.get("uf", 0.0))
        return cls(
            uf=stage(uf, "uf"), ub=stage(ub, "ub"), of=stage(of, "of"), ob=stage(ob, "ob"),
            of_all=None if of_all is None else stage(of_all, "of_all"),
            of_ng=None if of_ng is None else stage(of_ng, "of_ng"),
            uf_ng=None if uf_ng is None else stage(uf_ng, "uf_ng"),
            weights=stage(weights, "weights"),
            wa=act(wa, "wa", wa), wabar=act(wabar, "wabar", wa), wd=act(wd, "wd", wa),
            name=name, **kw,
        )

    # ------------------------------------------------------------------ derived values
    @property
    def L(self) -> int:
        """Number of stages, loss excluded."""
        return len(self.wa) - 2

    @property
    def is_integer(self) -> bool:
        """True when every memory size is an integer (the DPs can then run in exact mode)."""
        arr = np.concatenate([self.wa, self.wabar, self.wd, self.of, self.ob, self.of_all, self.of_ng])
        return bool(np.all(arr == np.round(arr)))

    @property
    def own_overhead_stages(self) -> int:
        """Number of stages (1..L+1) where a forward's own overhead differs from ``of``: 0 for a chain in
        the papers' one-overhead model."""
        return int(np.sum((self.of_all[1:] != self.of[1:]) | (self.of_ng[1:] != self.of[1:])))

    def one_overhead(self) -> "Chain":
        """The same chain in the papers' model: ``of`` for F_all and the no-grad forwards alike (an
        upper bound of each forward's own, so every plan of it is valid on this chain). Its arrays are
        copies."""
        return dataclasses.replace(self.without_resident(), resident=self.resident,
                                   resident_grads=self.resident_grads, resident_values=self.resident_values,
                                   of_all=self.of.copy(), of_ng=self.of.copy())

    @property
    def ufn(self) -> np.ndarray:
        """The no-grad forwards' (F_ck, F_none) times: ``uf_ng`` where given, else ``uf``."""
        return self.uf if self.uf_ng is None else self.uf_ng

    @property
    def own_times(self) -> bool:
        """True when the chain charges a no-grad forward other than ``uf`` or a turn (``u_turn`` > 0):
        not the papers' time model (see the module docstring)."""
        return self.u_turn > 0 or (self.uf_ng is not None and bool(np.any(self.uf_ng[1:] != self.uf[1:])))

    def papers_times(self) -> "Chain":
        """The same chain in the papers' time model: ``uf`` for every forward, no turn cost (what the
        solvers that do not model them plan with; see :func:`memplan.remat.solve`)."""
        return dataclasses.replace(self, uf_ng=None, u_turn=0.0)

    def check_papers_times(self, what: str) -> None:
        """Raise a ValueError naming ``what`` when the chain has its own no-grad forward times or turn
        cost: for the solvers and bounds that plan in the papers' time model only (their values would not
        be the simulator's, and a bound would not be one)."""
        if self.own_times:
            raise ValueError(f"{what}: plans in the papers' time model; this chain has its own no-grad forward "
                             "times or turn cost (Chain.uf_ng, Chain.u_turn): solve chain.papers_times() "
                             "(memplan.remat.solve does, and replays the plan with them)")

    def store_all_time(self) -> float:
        """Makespan with no re-materialization: sum of u_f + u_b over stages 1..L+1."""
        return float(self.uf[1:].sum() + self.ub[1:].sum())

    def total_weights(self) -> float:
        return float(self.weights.sum())

    def scaled(self, time: float = 1.0, memory: float = 1.0) -> "Chain":
        """A copy with every time multiplied by ``time`` and every size by ``memory``."""
        return dataclasses.replace(
            self, uf=self.uf * time, ub=self.ub * time, wa=self.wa * memory, wabar=self.wabar * memory,
            wd=self.wd * memory, of=self.of * memory, ob=self.ob * memory, weights=self.weights * memory,
            of_all=self.of_all * memory, of_ng=self.of_ng * memory, stage_names=list(self.stage_names),
            uf_ng=None if self.uf_ng is None else self.uf_ng * time, u_turn=self.u_turn * time,
            provenance=dict(self.provenance), resident=self.resident * memory,
            resident_grads=tuple((g * memory, k, r) for g, k, r in self.resident_grads),
            resident_values=tuple((b * memory, k, r) for b, k, r in self.resident_values))

    def without_resident(self) -> "Chain":
        """A copy with ``resident = 0``: what the front ends hand to their DPs and MILPs, under the
        memory limit minus ``resident``."""
        return dataclasses.replace(self, uf=self.uf.copy(), ub=self.ub.copy(), wa=self.wa.copy(),
                                   wabar=self.wabar.copy(), wd=self.wd.copy(), of=self.of.copy(), ob=self.ob.copy(),
                                   weights=self.weights.copy(), of_all=self.of_all.copy(), of_ng=self.of_ng.copy(),
                                   uf_ng=None if self.uf_ng is None else self.uf_ng.copy(),
                                   stage_names=list(self.stage_names),
                                   provenance=dict(self.provenance), resident=0.0, resident_grads=(),
                                   resident_values=())

    def sub_chain(self, first: int, last: int) -> "Chain":
        """Stages ``first..last`` (1-based, inclusive) as a new chain with a zero-cost loss."""
        if not 1 <= first <= last <= self.L:
            raise ValueError(f"sub_chain({first}, {last}) out of range 1..{self.L}")
        sl = slice(first, last + 1)
        acts = slice(first - 1, last + 1)
        return Chain.from_stages(
            uf=self.uf[sl], ub=self.ub[sl], of=self.of[sl], ob=self.ob[sl], weights=self.weights[sl],
            wa=self.wa[acts], wabar=self.wabar[acts], wd=self.wd[acts],
            name=f"{self.name}[{first}:{last}]",
            stage_names=["input"] + self.stage_names[first:last + 1] + ["loss"],
            provenance={**self.provenance, "sub_chain": [first, last]}, resident=self.resident,
            of_all=self.of_all[sl], of_ng=self.of_ng[sl],
            uf_ng=None if self.uf_ng is None else self.uf_ng[sl], u_turn=self.u_turn,
        )

    def table(self):
        """The per-stage table as a pandas DataFrame (index = stage 0..L+1), in seconds and bytes."""
        import pandas as pd

        cols = {"name": self.stage_names, "uf": self.uf}
        if self.uf_ng is not None:
            cols["uf_ng"] = self.uf_ng
        cols.update({"ub": self.ub, "wa": self.wa, "wabar": self.wabar, "wd": self.wd, "of": self.of,
                     "of_all": self.of_all, "of_ng": self.of_ng, "ob": self.ob, "weights": self.weights})
        return pd.DataFrame(cols, index=pd.RangeIndex(0, self.L + 2, name="stage"))

    def __repr__(self) -> str:
        return (f"Chain({self.name!r}, L={self.L}, store-all time={self.store_all_time():.4g}s, "
                f"activations={self.wabar[1:].sum():.4g}B)")


#: the most stages :func:`random_chain` makes (about 120 MB of arrays)
RANDOM_MAX_L = 1_000_000


def random_chain(L: int, seed: int = 0, *, integer: bool = True, max_size: int = 10, max_time: int = 10,
                 overheads: bool = True, own_overheads: bool = False, forward_overhead_scale: float = 1,
                 name: str | None = None) -> Chain:
    """A random chain for tests and benchmarks, reproducible from ``seed``.

    With ``integer=True`` (the default) all sizes are small integers in ``1..max_size`` so the DPs can
    run in exact mode and an exhaustive search is cheap; times are integers in ``1..max_time``.
    ``abar^l >= a^l`` always (abar contains a), ``delta^l = a^l``, the loss stage costs nothing.
    With ``integer=False`` the values are floats in realistic units (bytes ~ 1e6..1e8, seconds ~ 1e-3).
    ``own_overheads=True``: each forward's own overhead differs (``of_all``, ``of_ng``): per stage one of
    the two is ``of`` (as the profiler's larger) and the other is drawn in ``0..of``, from a second
    random stream, so the other arrays are those of the same seed without it.
    ``forward_overhead_scale``: ``of`` (and ``of_all``, ``of_ng``) multiplied by it after the draw, so
    that forwards, not only backward steps, can set the least memory; the other arrays are unchanged.
    """
    for arg, v in (("L", L), ("max_size", max_size), ("max_time", max_time)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"random_chain: {arg}={v!r} must be a whole number >= 1")
    if L > RANDOM_MAX_L:
        # a chain holds about 15 arrays of L numbers: L = 1e8 asked 12 GB (the OOM killer ended the sweep)
        raise ValueError(f"random_chain: L={L!r} is more than {RANDOM_MAX_L} stages; give at most that "
                         f"(1000 stages is already a long chain for every solver)")
    # numpy's own errors named neither (seed=-1: 'expected non-negative integer'; a string scale: a ufunc
    # type error), and a negative scale was reported as 'Chain.of[1] = -3 is out of range'
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise ValueError(f"random_chain: seed={seed!r} must be a whole number >= 0 (or None for a fresh one)")
    fos = forward_overhead_scale
    if isinstance(fos, bool) or not isinstance(fos, (int, float, np.number)) or not (np.isfinite(fos) and fos >= 0):
        raise ValueError(f"random_chain: forward_overhead_scale={fos!r} must be a finite number >= 0 (1: as drawn)")
    rng = np.random.default_rng(seed)
    if integer:
        wa = rng.integers(1, max_size + 1, L + 1).astype(float)
        extra = rng.integers(0, max_size + 1, L + 1) * rng.integers(0, 2, L + 1)
        wabar = wa + extra
        uf = rng.integers(1, max_time + 1, L).astype(float)
        ub = uf + rng.integers(0, max_time + 1, L)
        of = (rng.integers(0, max_size // 2 + 1, L) if overheads else np.zeros(L)).astype(float)
        ob = (rng.integers(0, max_size + 1, L) if overheads else np.zeros(L)).astype(float)
        weights = rng.integers(1, max_size + 1, L).astype(float)
    else:
        wa = rng.uniform(1e6, 1e8, L + 1)
        wabar = wa * rng.uniform(1.0, 3.0, L + 1)
        uf = rng.uniform(1e-4, 1e-2, L)
        ub = uf * rng.uniform(1.0, 3.0, L)
        of = rng.uniform(0, 5e7, L) if overheads else np.zeros(L)
        ob = rng.uniform(0, 1e8, L) if overheads else np.zeros(L)
        weights = rng.uniform(1e5, 1e8, L)
    wabar[0] = wa[0]
    own = {}
    if own_overheads:
        r2 = np.random.default_rng([seed, 1])
        other = np.floor(of * r2.uniform(0, 1, L)) if integer else of * r2.uniform(0, 1, L)
        first = r2.integers(0, 2, L).astype(bool)      # which forward keeps the larger (of)
        own = dict(of_all=np.where(first, of, other) * forward_overhead_scale,
                   of_ng=np.where(first, other, of) * forward_overhead_scale)
    of = of * forward_overhead_scale
    return Chain.from_stages(uf=uf, ub=ub, wa=wa, wabar=wabar, wd=wa, of=of, ob=ob, weights=weights,
                             name=name or f"random-L{L}-seed{seed}",
                             provenance={"generator": "models.chain.random_chain", "L": L, "seed": seed,
                                         "integer": integer, "own_overheads": own_overheads,
                                         **({"forward_overhead_scale": forward_overhead_scale}
                                            if forward_overhead_scale != 1 else {})}, **own)
