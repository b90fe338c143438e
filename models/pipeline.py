"""Pipelined model parallelism (paper 003): the problem's definition and its simulators.

Paper 003 (Beaumont, Eyraud-Dubois, Shilova, "An Integer Linear Programming Approach for Pipelined
Model Parallelism", RR-9452, 2022), sections 3 and 4. This module is the single definition of the
problem's semantics: the task data, the schedule types (:class:`Pattern`, :class:`CyclicSchedule`,
:class:`EagerResult`), the simulators that replay them (:func:`simulate_pattern`,
:func:`simulate_cyclic`, :func:`check_and_measure`), the memory model, the allocation helpers and the
bounds that are properties of the problem (:func:`period_lower_bound`, :func:`memory_lower_bound`).
The simulators know nothing about how a schedule was found. What finds schedules lives elsewhere:

* ``baselines/pipeline_eager.py``: PipeDream's eager 1F1B policy (``simulate_eager``) and the
  extraction of its steady state;
* ``baselines/pipeline_modular.py``: the serial pattern, modular list scheduling of 1F1B patterns,
  period bisection and snapping;
* ``baselines/pipeline.py``: PipeDream's and GPipe's planners, partition searches, start patterns;
* ``formulations/pipeline_ilp.py``, ``pipeline_cyclic.py``, ``pipeline_balance.py``: the MILPs;
* :mod:`memplan.pipeline`: the front end that runs them for one ``solve`` call.

Tasks (section 3.1)
-------------------
A chain of L layers gives 2L compute tasks ``T_1..T_2L``: ``T_m = F_m`` for ``m <= L`` and
``T_m = B_{2L-m+1}`` for ``m > L`` (so ``T_{L+1} = B_L`` and ``T_{2L} = B_1``). The loss stage L+1 of
a :class:`~models.chain.Chain` is folded into the last layer: ``d_L = u_f^L + u_f^{L+1}``,
``d_{L+1} = u_b^L + u_b^{L+1}``, ``W_L += W_{L+1}``. ``A[m]`` is the size of the output of ``T_m``
(``A[0]`` is the input a^0): ``A[m] = wa[m]`` for ``m < L``, ``A[L] = max(wa[L], wd[L])`` (the loss
output and its gradient, the input of ``B_L``), and ``A[m] = wd[2L-m]`` for ``m > L`` (``B_l`` outputs
delta^{l-1}). The communication task ``T^c_{m,m+1}`` (``m = 1..2L-1``) carries ``A[m]``; it takes
``A[m] / beta`` on the link between the GPUs of ``T_m`` and ``T_{m+1}`` and nothing when both are on
the same GPU. As in the paper, every pair of GPUs has its own link, shared by both directions.
:func:`task_data` computes all of this once per (chain, bandwidth); every algorithm takes the
resulting :class:`TaskData` rather than rebuilding it.

Pattern (Definition 1)
----------------------
A :class:`Pattern` gives the GPU of every task (``F_l`` and ``B_l`` on the same GPU, paper's (4)), the
start ``tau[m]`` of every task and ``tau_c[m]`` of every communication within the period, and the
period ``T``. In period ``k`` task ``T_m`` starts at ``tau[m] + k T``. Lemma 1: mini-batch indices are
assigned greedily along the chain with the *smallest* shifts: ``T_m`` in period ``k`` processes
mini-batch ``k - h_m`` where ``h_1 = 0`` and each edge (task -> communication -> task, or task -> task
on one GPU) adds the smallest ``s >= 0`` such that the successor's instance ``s`` periods later starts
after the predecessor ends. The simulator unrolls the pattern over enough periods, checks every
dependency and the exclusivity of every GPU and link on the unrolled schedule, and measures memory.

Memory model (section 4.2), measured over time on each GPU
-----------------------------------------------------------
* models (33): ``3 W_l`` for every layer l on the GPU (two weight versions + the gradient), constant;
* buffers (34)-(35): ``A[m]`` on the sender's and on the receiver's GPU for every communication
  between different GPUs, reserved for the whole run (the paper's assumption: one buffer per data);
* stored activations: layer l keeps ``S[l]`` bytes for its mini-batch from the end of ``F_l`` until
  the end of ``B_l``. Two memory models (:data:`MEMORY_MODELS`, ``TaskData.memory_model``):

  - ``"paper"`` (paper 003 section 4.2.2, simplified): ``S[l] = A[l-1]``, ``F_l`` keeps only its input
    ``a^{l-1}``. It is about half of what autograd keeps (ResNet-18, batch 8: 273 MB instead of
    527 MB per mini-batch); use it to reproduce paper 003's figures;
  - ``"autograd"`` (the front end's default): ``S[l]`` is what autograd saves for ``B_l``, from the
    profiler's measurements (:func:`autograd_stored_bytes`: every saved storage attributed to the
    first layer that saves it; the loss stage's is added to the last layer). A stage of layers
    ``l..r`` thus keeps ``S[l] + ... + S[r]`` per in-flight mini-batch, the bytes autograd saves for
    its forward pass (within 5% on a profiled ResNet-18, ``tests/test_pipeline_memory_model.py``),
    plus ``H[l]`` when layer l is the first of its GPU (layer l-1 elsewhere): the stage input
    a^{l-1} that both ``F_{l-1}`` (its output) and ``F_l`` (its input) save is counted once in S,
    with layer l-1, but then both GPUs hold a copy (:func:`autograd_boundary_bytes`).
    Chains without those measurements use ``S[l] = abar^l`` (``wabar[l]``) and ``H = 0``; so does
    the paper's model. The running-task and direct-dependency items below are kept as in the paper;
* resident tensors (``Chain.resident``, tensors crossing two or more cuts of a multi-tensor
  linearization, and their gradients; issue 30). Where the provenance says where each lives
  (:func:`resident_spans`: computed by stage p, last read by stage q), each GPU that touches its span
  keeps one copy of it and of its gradient per mini-batch in flight: the GPU of layer max(p, 1) in
  ``S[max(p, 1)]``, a GPU whose first layer l lies in (max(p, 1), q] in ``H[l]`` (it receives the
  tensor, and sends its share of the gradient back, once); it is sent over every link it crosses
  (``A[l]`` += its bytes and ``A[2L-l]`` += its gradient's, for the cuts l = max(p, 1)..q-1 before
  the loss). Each GPU then counts exactly the resident tensors whose span meets its layers, once.
  Without spans (or for bytes no span accounts for), conservatively: every GPU keeps a copy of all of
  them per mini-batch (added to ``S[1]`` and ``H[l]``, l >= 2) and every link carries all of them
  (``A[m]``, m = 1..2L-1). With ``resident = 0`` nothing changes;
* running task (Lemma 8's ``a_{l-1} + a_l``): during ``T_m``, its input ``A[m-1]`` and output ``A[m]``;
* direct dependencies (22): when ``T_m`` and ``T_{m+1}`` share a GPU, ``A[m]`` from the end of ``T_m``
  to the start of ``T_{m+1}`` (of the same mini-batch).

Every item starts and ends at a start or end of a task of its GPU, so the memory is evaluated during
every task instance, in the GPU's execution order (by start, end, then a tie rank: a task of zero
duration, frequent in profiles, still holds its input and output for an instant, as the ILP counts
it); between tasks the level is never above that of the next task. The peak is the maximum over
task instances. With these definitions the memory of a pattern equals the ILP's left-hand side of
(36) at the start of each task. The same rules measure explicit schedules (:class:`Unrolled`: an
eager 1F1B run, a K-periodic schedule) in :func:`check_and_measure`.

Examples
--------
Two layers on two GPUs, free communications, no pipelining (period 6, every shift 0):

>>> from memplan.models.chain import Chain
>>> c = Chain.from_stages(uf=[1.0, 1.0], ub=[2.0, 2.0], wa=[1.0, 1.0, 1.0], weights=[0.0, 0.0])
>>> p = Pattern(gpu=[0, 1, 1, 0], tau=[0, 1, 2, 4], tau_c=[1, 2, 4], T=6)
>>> r = simulate_pattern(p, task_data(c, None))
>>> float(r.period), r.shifts, float(r.peak_memory)
(6.0, [0, 0, 0, 0], 5.0)
>>> float(period_lower_bound(task_data(c, None), 2))
3.0
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from memplan.models.chain import Chain

REL_TOL = 1e-6   # relative tolerance (of the period) on times read back from a MILP

#: the memory models of the stored activations (see the module docstring), the front end's default first
MEMORY_MODELS = ("autograd", "paper")


class InvalidPattern(ValueError):
    """The pattern or schedule breaks a rule of Definition 1; the message says which."""



# ----------------------------------------------------------------------------- durations and sizes
@dataclass
class TaskData:
    """Durations and sizes of the 2L tasks, in the paper's task indexing (index 0 unused), built once
    per (chain, bandwidth) by :func:`task_data` and passed to every algorithm."""

    L: int
    d: np.ndarray        # d[m], m = 1..2L
    dc: np.ndarray       # dc[m], m = 1..2L-1: communication time of A[m] between two GPUs
    A: np.ndarray        # A[m], m = 0..2L: size of the output of T_m (A[0] = input)
    W: np.ndarray        # W[l], l = 1..L: weights of layer l (loss folded into L)
    wa: np.ndarray | None = None       # the chain's a^l, l = 0..L (PipeDream's planner counts these)
    bandwidth: float | None = None     # bytes/s of every link (None: free communications)
    name: str = ""                     # the chain's name
    S: np.ndarray | None = None        # S[l], l = 1..L: bytes layer l keeps per mini-batch from the end
                                       # of F_l to the end of B_l (the memory model; default: A[l-1])
    memory_model: str = "paper"        # "paper" (S[l] = A[l-1]) or "autograd" (S[l] = abar^l)
    H: np.ndarray | None = None        # H[l], l = 1..L: bytes layer l keeps per mini-batch in addition
                                       # to S[l] when it is the first layer of its GPU (default: 0)

    def __post_init__(self) -> None:
        if self.memory_model not in MEMORY_MODELS:
            raise ValueError(f"memory_model {self.memory_model!r} is not one of {', '.join(MEMORY_MODELS)}")
        if self.S is None:
            if self.memory_model != "paper":
                raise ValueError("give S (the stored bytes per layer) with memory_model='autograd'")
            self.S = np.zeros(self.L + 1)
            self.S[1:] = np.asarray(self.A, dtype=float)[0:self.L]
        if self.H is None:
            self.H = np.zeros(self.L + 1)
        self.H = np.asarray(self.H, dtype=float)
        if self.H.shape != (self.L + 1,) or not np.all(self.H >= 0) or self.H[:2].any():
            raise ValueError(f"H must hold L + 1 = {self.L + 1} nonnegative values with H[0] = H[1] = 0")

    def first_on_gpu(self, l: int, gpu: Sequence[int]) -> bool:
        """Whether layer l is the first of its GPU in chain order, i.e. ``l = 1`` or layer l-1 is on
        another GPU (``gpu``: GPU of layer l at index l-1; a list of task GPUs works too)."""
        return l == 1 or gpu[l - 2] != gpu[l - 1]

    def stored(self, l: int, gpu: Sequence[int]) -> float:
        """Bytes layer l keeps per in-flight mini-batch (from the end of F_l to the end of B_l) under
        the allocation ``gpu`` (GPU of layer l at index l-1, or of task T_m at index m-1): ``S[l]``,
        plus ``H[l]`` when l is the first layer of its GPU."""
        return float(self.S[l] + (self.H[l] if self.first_on_gpu(l, gpu) else 0.0))

    def stored_all(self, gpu: Sequence[int]) -> np.ndarray:
        """:meth:`stored` of every layer, index l = 1..L (index 0 unused, 0)."""
        out = np.zeros(self.L + 1)
        for l in range(1, self.L + 1):
            out[l] = self.stored(l, gpu)
        return out

    @property
    def n(self) -> int:
        return 2 * self.L

    def layer(self, m: int) -> int:
        """The layer of task m (F_m or B_{2L-m+1})."""
        return m if m <= self.L else 2 * self.L - m + 1

    def forward(self, l: int) -> int:
        return l

    def backward(self, l: int) -> int:
        return 2 * self.L - l + 1


def task_data(chain: Chain, bandwidth: float | None, memory_model: str = "paper") -> TaskData:
    """Paper 003's ``d_m``, ``dc_m = A[m]/beta`` and ``A[m]`` from a Chain (see the module docstring).
    ``bandwidth=None`` means communications are free. ``memory_model`` (:data:`MEMORY_MODELS`) sets
    ``S[l]``, the bytes layer l keeps per mini-batch from the end of F_l to the end of B_l: ``A[l-1]``
    for ``"paper"`` (paper 003 section 4.2.2), :func:`autograd_stored_bytes` for ``"autograd"``
    (``wabar[l]`` without the profiler's measurements; the loss stage's is added to the last
    layer), and ``H[l]`` (:func:`autograd_boundary_bytes` under ``"autograd"``, else 0), what layer
    l keeps in addition when it is the first layer of its GPU. The front end
    :func:`memplan.pipeline.solve` defaults to ``"autograd"``; this model-level default stays
    ``"paper"``."""
    if memory_model not in MEMORY_MODELS:
        raise ValueError(f"memory_model {memory_model!r} is not one of {', '.join(MEMORY_MODELS)}")
    L = chain.L
    n = 2 * L
    d = np.zeros(n + 1)
    A = np.zeros(n + 1)
    for l in range(1, L + 1):
        d[l] = chain.uf[l]
        d[n - l + 1] = chain.ub[l]
    d[L] += chain.uf[L + 1]
    d[L + 1] += chain.ub[L + 1]
    for m in range(0, L):
        A[m] = chain.wa[m]
    A[L] = max(chain.wa[L], chain.wd[L])
    for m in range(L + 1, n + 1):
        A[m] = chain.wd[n - m]
    dc = np.zeros(n)
    if bandwidth is not None and bandwidth > 0:
        dc[1:] = A[1:n] / bandwidth
    W = np.zeros(L + 1)
    W[1:] = chain.weights[1:L + 1]
    W[L] += chain.weights[L + 1]
    wa = np.asarray(chain.wa[:L + 1], dtype=float).copy()
    S = np.zeros(L + 1)
    H = np.zeros(L + 1)
    if memory_model == "paper":
        S[1:] = A[0:L]
    else:
        kept = autograd_stored_bytes(chain)
        S[1:] = kept[1:L + 1]
        S[L] += kept[L + 1]
        H[1:] = autograd_boundary_bytes(chain)[1:L + 1]     # the loss stage never starts a GPU
    r = float(getattr(chain, "resident", 0.0))
    spans = resident_spans(chain) if r else []
    for p, q, value, grad in spans:  # where each resident tensor lives (see the module docstring)
        first = max(p, 1)
        S[first] += value + grad
        H[first + 1:min(q, L) + 1] += value + grad
        for l in range(first, min(q - 1, L) + 1):
            A[l] += value
            if l < L:
                A[n - l] += grad
    r -= sum(v + g for _, _, v, g in spans)
    if r > 1e-6 * max(1.0, float(getattr(chain, "resident", 0.0))):
        # resident bytes no span accounts for: per GPU and mini-batch, per link (conservatively)
        S[1] += r
        H[2:] += r
        A[1:n] += r
    if spans or r > 0:
        if bandwidth is not None and bandwidth > 0:
            dc[1:] = A[1:n] / bandwidth
    return TaskData(L=L, d=d, dc=dc, A=A, W=W, wa=wa, bandwidth=bandwidth, name=chain.name, S=S,
                    memory_model=memory_model, H=H)


def resident_spans(chain: Chain) -> list[tuple[int, int, float, float]]:
    """``(p, q, value, gradient)`` for each resident tensor of a multi-tensor chain (issue 30): computed
    by stage p (0: the input), last read by stage q (L+1: the loss), its bytes and its gradient's,
    from the provenance's ``resident`` list (``memplan profile``, ``memplan import-pipedream``:
    ``stage``, ``last_stage``, ``bytes``, ``charged``). Empty when the chain has no such list, when
    an entry is malformed, or when the entries charge more than ``chain.resident`` (a chain scaled or
    edited since): then the pipeline charges ``resident`` everywhere, conservatively."""
    L = chain.L
    rows = (chain.provenance or {}).get("resident")
    if not isinstance(rows, list) or not rows:
        return []
    out = []
    for row in rows:
        try:
            p, q = int(row["stage"]), int(row["last_stage"])
            value, charged = float(row["bytes"]), float(row["charged"])
        except (KeyError, TypeError, ValueError):
            return []
        if not (0 <= p < q <= L + 1 and q - p >= 2 and math.isfinite(charged) and 0 <= value <= charged):
            return []
        out.append((p, q, value, charged - value))
    if sum(v + g for *_, v, g in out) > float(chain.resident) * (1 + 1e-9) + 1e-6:
        return []
    return out


def _saved_measurements(chain: Chain) -> tuple[np.ndarray, np.ndarray] | None:
    """The profiler's ``saved_by_autograd_bytes`` and ``saved_input_bytes`` (index l-1 for stage
    l = 1..L+1) when ``chain.provenance`` has both, complete and valid; else None."""
    L = chain.L
    prov = chain.provenance or {}
    s, i = prov.get("saved_by_autograd_bytes"), prov.get("saved_input_bytes")
    if (isinstance(s, (list, tuple)) and isinstance(i, (list, tuple)) and len(s) == L + 1 and len(i) == L + 1
            and all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0 for v in [*s, *i])):
        return np.asarray(s, dtype=float), np.asarray(i, dtype=float)
    return None


def _own_outputs(chain: Chain, s: np.ndarray) -> np.ndarray:
    """``o_l`` (index l = 0..L+1): what of its output a^l ``F_l`` saves itself, ``s_l + a^l - abar^l``
    clipped to ``[0, a^l]`` (``abar^l`` is the output plus what F_l saved apart from its input, the
    output counted once when saved); ``o_0 = 0``: nothing before F_1 saves the network input."""
    wa, wabar = np.asarray(chain.wa, dtype=float), np.asarray(chain.wabar, dtype=float)
    out = np.zeros(chain.L + 2)
    for l in range(1, chain.L + 2):
        out[l] = min(wa[l], max(0.0, float(s[l - 1]) + wa[l] - wabar[l]))
    return out


def autograd_stored_bytes(chain: Chain) -> np.ndarray:
    """Per stage l = 1..L+1 (index 0 unused), the bytes autograd keeps for stage l's mini-batch from
    the end of ``F_l`` to the end of ``B_l`` (the ``"autograd"`` memory model).

    With the profiler's measurements in ``chain.provenance`` (``saved_by_autograd_bytes``: ``s_l``,
    the storages ``F_l`` saves for ``B_l`` apart from its input, its output included when it saves it;
    ``saved_input_bytes``: ``i_l``, the bytes of its input it saves), a tensor is attributed to the
    first layer that saves it: ``s_l + max(0, i_l - o_{l-1})``, where ``o_{l-1} = s_{l-1} + a^{l-1} -
    abar^{l-1}`` (clipped to ``[0, a^{l-1}]``) is what of its output ``F_{l-1}`` saves itself. Over any
    run of layers ``l..r`` this sums to the bytes autograd saves for them, except that a stage input
    saved both by ``F_{l-1}`` (as its output) and by ``F_l`` is counted once, with layer ``l-1``: when
    the two layers run on different GPUs, :func:`autograd_boundary_bytes` is what layer l adds.
    Without those measurements (an imported or hand-made chain): ``abar^l`` (``wabar[l]``), which
    contains ``a^l`` whether or not a backward needs it."""
    L = chain.L
    out = np.zeros(L + 2)
    meas = _saved_measurements(chain)
    if meas is not None:
        s, i = meas
        own = _own_outputs(chain, s)
        for l in range(1, L + 2):
            out[l] = s[l - 1] + max(0.0, i[l - 1] - own[l - 1])
        return out
    out[1:] = np.asarray(chain.wabar[1:L + 2], dtype=float)
    return out


def autograd_boundary_bytes(chain: Chain) -> np.ndarray:
    """Per stage l = 1..L+1 (index 0 unused), ``H[l] = min(o_{l-1}, i_l)``: the bytes of its input
    a^{l-1} that ``F_l`` saves and that :func:`autograd_stored_bytes` attributes to layer l-1 (which
    saves them too, as its output). When layer l is the first layer of its GPU, that GPU keeps its
    received copy of a^{l-1} for ``B_l`` while the GPU of layer l-1 keeps its own for ``B_{l-1}``, so
    layer l keeps ``S[l] + H[l]`` per in-flight mini-batch; a stage of layers ``l..r`` then keeps
    ``S[l] + ... + S[r] + H[l]``, the bytes autograd saves for its forward pass. ``H[1] = 0``
    (nothing before F_1 saves the network input). All zeros without the profiler's measurements
    (the ``abar`` fallback of :func:`autograd_stored_bytes`)."""
    out = np.zeros(chain.L + 2)
    meas = _saved_measurements(chain)
    if meas is not None:
        s, i = meas
        own = _own_outputs(chain, s)
        for l in range(1, chain.L + 2):
            out[l] = min(own[l - 1], i[l - 1])
    return out


def as_task_data(data: "TaskData | Chain", bandwidth: float | None = None) -> TaskData:
    """``data`` itself when it is a :class:`TaskData` (then ``bandwidth`` must be None: it is built
    in), else :func:`task_data` of the chain ``data`` at ``bandwidth``. Lets the simulators take
    either, so that a caller holding the task data never rebuilds it."""
    if isinstance(data, TaskData):
        if bandwidth is not None:
            raise TypeError("give the TaskData alone: its bandwidth is built in")
        return data
    return task_data(data, bandwidth)


# ----------------------------------------------------------------------------- bounds
def period_lower_bound(td: TaskData, P: int) -> float:
    """``max(sum_m d_m / P, max_l (u_F^l + u_B^l))``: the work is shared by at most P GPUs, and F_l and
    B_l run on one GPU within each period (the loss is counted with the last layer)."""
    per_layer = max(td.d[l] + td.d[td.backward(l)] for l in range(1, td.L + 1))
    return float(max(td.d[1:].sum() / P, per_layer))


def memory_lower_bound(td: TaskData, P: int) -> float:
    """A memory below which no pattern exists on P GPUs: some GPU holds at least 1/P of the weights
    (3 copies); the GPU of layer l holds ``3 W_l`` and, while ``B_l`` runs, the stored ``a^{l-1}``
    plus the input and output gradients of ``B_l`` (while ``F_l`` runs: its input and output)."""
    best = 3 * td.W[1:].sum() / P
    for l in range(1, td.L + 1):
        m = td.backward(l)
        best = max(best, 3 * td.W[l] + td.A[l - 1] + td.A[l],
                   3 * td.W[l] + td.S[l] + td.A[m - 1] + td.A[m])
    return float(best)


# ----------------------------------------------------------------------------- pattern
class _Allocation:
    """Allocation queries shared by :class:`Pattern` and :class:`CyclicSchedule` (``self.gpu``: GPU of
    task T_m at index m-1)."""

    gpu: list[int]

    @property
    def L(self) -> int:
        return len(self.gpu) // 2

    def layer_gpus(self) -> list[int]:
        """GPU of layer l at index l-1."""
        return self.gpu[: self.L]

    def gpus_used(self) -> list[int]:
        return sorted(set(self.gpu))

    def layers_on(self, g: int) -> list[int]:
        return [l for l in range(1, self.L + 1) if self.gpu[l - 1] == g]

    def is_contiguous(self) -> bool:
        lg = self.layer_gpus()
        seen, prev = set(), None
        for g in lg:
            if g != prev:
                if g in seen:
                    return False
                seen.add(g)
                prev = g
        return True


@dataclass
class Pattern(_Allocation):
    """A periodic pattern (Definition 1). Lists are 0-based: ``gpu[m-1]`` and ``tau[m-1]`` belong to
    task ``T_m`` (m = 1..2L), ``tau_c[m-1]`` to the communication of ``A[m]`` (m = 1..2L-1; ignored
    when ``T_m`` and ``T_{m+1}`` share a GPU)."""

    gpu: list[int]
    tau: list[float]
    tau_c: list[float]
    T: float
    meta: dict[str, Any] = field(default_factory=dict)
    rank: list[int] | None = None   # order of tasks that start and end at the same time (default: m)

    def __post_init__(self) -> None:
        if self.rank is not None:
            self.rank = [int(r) for r in self.rank]
        self.gpu = [int(g) for g in self.gpu]
        self.tau = [float(t) for t in self.tau]
        self.tau_c = [float(t) for t in self.tau_c]
        self.T = float(self.T)

    def to_json(self) -> dict[str, Any]:
        return {"kind": "pipeline-pattern", "period": self.T, "gpu": self.gpu, "tau": self.tau,
                "tau_c": self.tau_c, "rank": self.rank, "layers_per_gpu": {str(g): self.layers_on(g) for g in self.gpus_used()},
                "meta": self.meta}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Pattern":
        return cls(gpu=data["gpu"], tau=data["tau"], tau_c=data["tau_c"], T=data["period"],
                   meta=dict(data.get("meta", {})), rank=data.get("rank"))


def link_key(a: int, b: int) -> tuple[int, int]:
    """The link between GPUs a and b (one per unordered pair, shared by both directions)."""
    return (a, b) if a < b else (b, a)


_link = link_key


def _shift(end_prev: float, start_next: float, T: float, tol: float) -> int:
    """Smallest s >= 0 with start_next + s*T >= end_prev (within tol)."""
    gap = end_prev - start_next
    if gap <= tol:
        return 0
    return int(math.ceil((gap - tol) / T))


def batch_shifts(pattern: Pattern, td: TaskData, tol: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Lemma 1 with the smallest shifts: ``h[m]`` (m = 1..2L) and ``hc[m]`` (m = 1..2L-1) such that in
    period k task T_m (communication m) processes mini-batch ``k - h[m]`` (``k - hc[m]``)."""
    n = td.n
    T = pattern.T
    tol = REL_TOL * T if tol is None else tol
    h = np.zeros(n + 1, dtype=int)
    hc = np.zeros(n, dtype=int)
    for m in range(1, n):
        end = pattern.tau[m - 1] + td.d[m]
        if pattern.gpu[m - 1] != pattern.gpu[m]:
            hc[m] = h[m] + _shift(end, pattern.tau_c[m - 1], T, tol)
            end_c = pattern.tau_c[m - 1] + td.dc[m]
            h[m + 1] = hc[m] + _shift(end_c, pattern.tau[m], T, tol)
        else:
            hc[m] = h[m]
            h[m + 1] = h[m] + _shift(end, pattern.tau[m], T, tol)
    return h, hc


# ----------------------------------------------------------------------------- unrolled schedules
@dataclass
class Unrolled:
    """An explicit schedule: every task and communication instance with its mini-batch.
    ``tasks[m]`` and ``comms[m]`` are arrays of shape (n_batches, 2) with start and end times (NaN
    where absent; ``comms[m]`` is None when T_m and T_{m+1} share a GPU)."""

    gpu: list[int]
    n_batches: int
    tasks: dict[int, np.ndarray]
    comms: dict[int, np.ndarray | None]
    rank: list[int] | None = None      # tie-break between tasks starting and ending together (T_m: rank[m-1])


@dataclass
class SimResult:
    """What the simulator measured."""

    period: float                     # steady-state time between two completions of T_2L
    peak_memory: float                # max over GPUs
    memory: dict[int, float]          # peak per GPU
    breakdown: dict[int, dict[str, float]]  # constant parts per GPU (weights, buffers)
    shifts: list[int] | None = None   # h[m] of the pattern (pattern replays only)
    timeline: dict[int, tuple[np.ndarray, np.ndarray]] | None = None  # per GPU: times, memory after

    def to_json(self) -> dict[str, Any]:
        return {"period": self.period, "peak_memory": self.peak_memory,
                "memory": {str(g): v for g, v in self.memory.items()},
                "breakdown": {str(g): v for g, v in self.breakdown.items()}, "shifts": self.shifts}


def task_gpus(td: TaskData, layer_gpu: Sequence[int]) -> list[int]:
    """GPU of every task T_m (index m-1) from the GPU of every layer (index l-1): B_l runs with F_l."""
    lg = [int(g) for g in layer_gpu]
    return lg + [lg[td.layer(m) - 1] for m in range(td.L + 1, td.n + 1)]


def allocation_load(td: TaskData, layer_gpu: Sequence[int]) -> float:
    """The largest load of an allocation (GPU of layer l at index l-1): the busiest GPU (sum of its
    task durations) or link (sum of the communications it carries, both directions). No pattern of the
    allocation has a smaller period; without memory limit one reaches it
    (:mod:`formulations.pipeline_balance`)."""
    gpu = task_gpus(td, layer_gpu)
    load: dict = {}
    for m in range(1, td.n + 1):
        load[gpu[m - 1]] = load.get(gpu[m - 1], 0.0) + float(td.d[m])
    for m in range(1, td.n):
        if gpu[m - 1] != gpu[m]:
            key = ("link",) + _link(gpu[m - 1], gpu[m])
            load[key] = load.get(key, 0.0) + float(td.dc[m])
    return max(load.values())


def _check_allocation(gpu: Sequence[int], T: float, td: TaskData, gpus: int | None, what: str) -> None:
    """Checks shared by patterns and K-periodic schedules: positive period, F_l and B_l on one GPU,
    at most ``gpus`` GPUs, no task longer than the (average) period."""
    if not (T > 0 and math.isfinite(T)):
        raise InvalidPattern(f"period must be positive, got {T}")
    for l in range(1, td.L + 1):
        if gpu[l - 1] != gpu[td.backward(l) - 1]:
            raise InvalidPattern(f"F_{l} and B_{l} on different GPUs ({gpu[l - 1]} and "
                                 f"{gpu[td.backward(l) - 1]}); paper 003 constraint (4)")
    if gpus is not None and len(set(gpu)) > gpus:
        raise InvalidPattern(f"{what} uses {len(set(gpu))} GPUs, only {gpus} available")
    for m in range(1, td.n + 1):
        if td.d[m] > T * (1 + REL_TOL):
            raise InvalidPattern(f"task T_{m} lasts {td.d[m]:.6g} > period {T:.6g}")


def check_pattern_shape(pattern: Pattern, td: TaskData, gpus: int | None = None) -> None:
    L, n = td.L, td.n
    if len(pattern.gpu) != n or len(pattern.tau) != n or len(pattern.tau_c) != n - 1:
        raise InvalidPattern(f"pattern sizes do not match L = {L}: need {n} tasks and {n - 1} communications")
    _check_allocation(pattern.gpu, pattern.T, td, gpus, "pattern")


def unroll(pattern: Pattern, td: TaskData, n_batches: int | None = None) -> tuple[Unrolled, np.ndarray]:
    """The periodic schedule of a pattern for mini-batches 0..n_batches-1 (Lemma 1, smallest shifts)."""
    h, hc = batch_shifts(pattern, td)
    n = td.n
    if n_batches is None:
        n_batches = int(max(12, 2 * h.max() + 6))
    T = pattern.T
    j = np.arange(n_batches)
    tasks, comms = {}, {}
    for m in range(1, n + 1):
        s = pattern.tau[m - 1] + (j + h[m]) * T
        tasks[m] = np.stack([s, s + td.d[m]], axis=1)
    for m in range(1, n):
        if pattern.gpu[m - 1] != pattern.gpu[m]:
            s = pattern.tau_c[m - 1] + (j + hc[m]) * T
            comms[m] = np.stack([s, s + td.dc[m]], axis=1)
        else:
            comms[m] = None
    return Unrolled(gpu=list(pattern.gpu), n_batches=n_batches, tasks=tasks, comms=comms,
                    rank=pattern.rank), h


def _check_exclusive(s: np.ndarray, e: np.ndarray, name: Callable[[int], str], what: str, tol: float) -> None:
    """No two intervals ``[s[i], e[i])`` overlap by more than tol; an instantaneous task (zero length)
    may touch an interval's ends but not lie strictly inside it. ``name(i)`` names interval i in
    the messages. Vectorized (sorted by start, then end; an eager run of 1000 layers has a million
    intervals, which as Python tuples took seconds); the first overlap in that order is reported."""
    s = np.asarray(s, dtype=float)
    e = np.asarray(e, dtype=float)
    long = (e - s) > tol
    idx = np.nonzero(long)[0]
    order = idx[np.lexsort((e[idx], s[idx]))]
    ss, ee = s[order], e[order]
    if len(order) > 1:
        bad = np.nonzero(ss[1:] < ee[:-1] - tol)[0]
        if len(bad):
            k = int(bad[0])
            raise InvalidPattern(f"{what}: {name(int(order[k]))} [{ss[k]:.6g}, {ee[k]:.6g}) overlaps "
                                 f"{name(int(order[k + 1]))} [{ss[k + 1]:.6g}, {ee[k + 1]:.6g})")
    if len(order) == len(s) or not len(order):
        return
    zero = np.nonzero(~long)[0]
    t = s[zero]
    k = np.searchsorted(ss, t - tol, side="left") - 1
    bad = np.nonzero((k >= 0) & (ee[np.maximum(k, 0)] > t + tol))[0]
    if len(bad):
        z = int(bad[0])
        kk = int(k[z])
        raise InvalidPattern(f"{what}: {name(int(zero[z]))} at {t[z]:.6g} lies inside {name(int(order[kk]))} "
                             f"[{ss[kk]:.6g}, {ee[kk]:.6g})")


def constant_memory(td: TaskData, gpu: Sequence[int]) -> dict[int, dict[str, float]]:
    """Per GPU, the memory held for the whole run: ``weights`` (3 W_l per layer, (33)) and
    ``buffers`` (A[m] on both ends of every communication between two GPUs, (34)-(35))."""
    const = {g: {"weights": 0.0, "buffers": 0.0} for g in sorted(set(gpu))}
    for l in range(1, td.L + 1):
        const[gpu[l - 1]]["weights"] += 3.0 * td.W[l]
    for m in range(1, td.n):
        if gpu[m - 1] != gpu[m]:
            const[gpu[m - 1]]["buffers"] += td.A[m]
            const[gpu[m]]["buffers"] += td.A[m]
    return const


def check_and_measure(un: Unrolled, td: TaskData, tol: float, *, timeline: bool = False,
                      steady_from: int | None = None) -> SimResult:
    """Check dependencies and exclusivity of an explicit schedule and measure per-GPU memory."""
    n, L = td.n, td.L
    B = un.n_batches
    gpu = un.gpu
    # --- dependencies, per mini-batch
    for m in range(1, n):
        prev_end = un.tasks[m][:, 1]
        nxt = un.tasks[m + 1][:, 0]
        c = un.comms[m]
        if c is not None:
            bad = np.nonzero(c[:, 0] < prev_end - tol)[0]
            if len(bad):
                j = bad[0]
                raise InvalidPattern(f"mini-batch {j}: communication of A[{m}] starts at {c[j, 0]:.6g} "
                                     f"before T_{m} ends at {prev_end[j]:.6g}")
            prev_end = c[:, 1]
        bad = np.nonzero(nxt < prev_end - tol)[0]
        if len(bad):
            j = bad[0]
            raise InvalidPattern(f"mini-batch {j}: T_{m + 1} starts at {nxt[j]:.6g} before its input "
                                 f"(from T_{m}) is available at {prev_end[j]:.6g}")
    # --- exclusivity of GPUs and links (in the order in which tasks first use them)
    per_gpu: dict[int, list[int]] = {}
    per_link: dict[tuple[int, int], list[int]] = {}
    for m in range(1, n + 1):
        per_gpu.setdefault(gpu[m - 1], []).append(m)
    for m in range(1, n):
        if un.comms[m] is not None:
            per_link.setdefault(_link(gpu[m - 1], gpu[m]), []).append(m)
    for g, ms in per_gpu.items():
        iv = np.concatenate([un.tasks[m] for m in ms])
        _check_exclusive(iv[:, 0], iv[:, 1], lambda i, ms=ms: f"T_{ms[i // B]}(batch {i % B})", f"GPU {g}", tol)
    for lk, ms in per_link.items():
        iv = np.concatenate([un.comms[m] for m in ms])
        keep = np.nonzero(iv[:, 1] - iv[:, 0] > 0)[0]          # zero-length transfers take no link time
        _check_exclusive(iv[keep, 0], iv[keep, 1],
                         lambda i, ms=ms, keep=keep: f"comm A[{ms[keep[i] // B]}](batch {keep[i] % B})",
                         f"link {lk}", tol)

    # --- memory: constant parts
    gpus = sorted(set(gpu))
    const = constant_memory(td, gpu)
    # --- memory: every time-varying item on a GPU starts and ends at an event (start or end) of a
    # task of that GPU, so the level is evaluated per task instance in the GPU's execution order
    # (start, then end, then the tie rank of the task: zero-length tasks are seen, as in (36)).
    rank = un.rank if un.rank is not None else list(range(1, n + 1))
    pos: dict[int, np.ndarray] = {}
    memory, tl = {}, {}
    for g in gpus:
        ms = [m for m in range(1, n + 1) if gpu[m - 1] == g]
        S = np.concatenate([un.tasks[m][:, 0] for m in ms])
        E = np.concatenate([un.tasks[m][:, 1] for m in ms])
        R = np.concatenate([np.full(B, rank[m - 1]) for m in ms])
        q = max(tol, 1e-300)
        order = np.lexsort((R, np.round(E / q), np.round(S / q)))
        where = np.empty(len(order), dtype=np.int64)
        where[order] = np.arange(len(order))
        for i, m in enumerate(ms):
            pos[m] = where[i * B:(i + 1) * B]
        N = len(order)
        diff = np.zeros(2 * N + 2)

        def add(p, qq, size):
            if size <= 0:
                return
            ok = qq > p
            np.add.at(diff, p[ok], size)
            np.add.at(diff, qq[ok], -size)

        for m in ms:
            add(2 * pos[m], 2 * pos[m] + 1, td.A[m - 1] + td.A[m])                  # running task
            if m <= L:      # stored activation (S[m], + H[m] when F_m is the first layer of g)
                add(2 * pos[m] + 1, 2 * pos[td.backward(m)] + 1, td.stored(m, gpu))
            if m < n and gpu[m] == g:
                add(2 * pos[m] + 1, 2 * pos[m + 1], td.A[m])                        # direct dependency
        level = np.cumsum(diff)[0:2 * N:2]          # during each task instance, in execution order
        base = const[g]["weights"] + const[g]["buffers"]
        memory[g] = float(base + max(float(level.max()) if N else 0.0, 0.0))
        if timeline:
            tl[g] = (S[order], base + level)
    # steady state: completions of T_2L between the first and the last quarter (warm-up and drain
    # excluded; a pattern replay is periodic from the start anyway)
    end = un.tasks[n][:, 1]
    k1, k2 = (B // 4, B - 1 - B // 4) if steady_from is None else (steady_from, B - 1)
    period = float((end[k2] - end[k1]) / (k2 - k1)) if k2 > k1 else float("nan")
    return SimResult(period=period, peak_memory=max(memory.values()), memory=memory, breakdown=const,
                     timeline=tl if timeline else None)


def simulate_pattern(pattern: Pattern, data: TaskData | Chain, bandwidth: float | None = None, *,
                     gpus: int | None = None, n_batches: int | None = None, timeline: bool = False) -> SimResult:
    """Replay a pattern: unroll it (Lemma 1), check dependencies and exclusivity on every GPU and
    link, measure per-GPU memory. ``data`` is the :class:`TaskData` (or a Chain, with
    ``bandwidth``). Raises :class:`InvalidPattern` when the pattern is not valid."""
    td = as_task_data(data, bandwidth)
    check_pattern_shape(pattern, td, gpus)
    un, h = unroll(pattern, td, n_batches)
    res = check_and_measure(un, td, REL_TOL * pattern.T, timeline=timeline)
    res.shifts = [int(x) for x in h[1:]]
    return res


# ----------------------------------------------------------------------------- normalization
def normalize_pattern(gpu: Sequence[int], starts: dict[int, float], starts_c: dict[int, float], T: float,
                      td: TaskData) -> Pattern:
    """Build a pattern satisfying the ILP's conventions (17)-(21) from start times known modulo T:
    ``T_1`` starts at 0, every end lies in [0, T], and on every GPU and link the tasks fit in a window
    of length T (cut at the task running at time 0, or at the first start after an idle time
    containing 0). Zero-length communications (same GPU) are put at the end of their producer."""
    n = td.n
    tol = REL_TOL * T
    off = starts[1]

    def windowed(items: list[tuple[int, float, float]]) -> dict[int, float]:
        # items: (key, start, duration); a valid resource has at most one item running across
        # time 0 (mod T): it starts at s - T, every other item at its start in [0, T).
        out = {}
        for k, s, dur in items:
            s = (s - off) % T
            if s > T - tol:
                s = 0.0
            if s + dur > T + tol:
                s -= T
            out[k] = s
        return out

    tau: dict[int, float] = {}
    for g in sorted(set(gpu)):
        tau.update(windowed([(m, starts[m], td.d[m]) for m in range(1, n + 1) if gpu[m - 1] == g]))
    tau_c: dict[int, float] = {}
    links: dict[tuple[int, int], list] = {}
    for m in range(1, n):
        if gpu[m - 1] != gpu[m]:
            links.setdefault(_link(gpu[m - 1], gpu[m]), []).append((m, starts_c[m], td.dc[m]))
        else:
            tau_c[m] = tau[m] + td.d[m]
    for lk, items in links.items():
        tau_c.update(windowed(items))
    return Pattern(gpu=list(gpu), tau=[tau[m] for m in range(1, n + 1)],
                   tau_c=[tau_c[m] for m in range(1, n)], T=T)



# ----------------------------------------------------------------------------- explicit schedules of a partition
@dataclass
class EagerResult:
    """An eager 1F1B run of a contiguous partition (computed by
    :func:`memplan.baselines.pipeline_eager.simulate_eager`): the explicit schedule and what
    :func:`check_and_measure` measured on it."""

    stages: list[tuple[int, int]]     # (first layer, last layer) per stage, stage s on GPU s
    noam: int
    n_batches: int
    sim: SimResult
    unrolled: Unrolled
    pattern: Pattern | None = None    # the steady state as a pattern, when it is 1-periodic

    @property
    def period(self) -> float:
        return self.sim.period

    @property
    def peak_memory(self) -> float:
        return self.sim.peak_memory

    def to_json(self) -> dict[str, Any]:
        return {"kind": "eager-1f1b", "stages": [list(s) for s in self.stages], "noam": self.noam,
                "n_batches": self.n_batches, "period": self.sim.period,
                "memory": {str(g): v for g, v in self.sim.memory.items()},
                "pattern": self.pattern.to_json() if self.pattern is not None else None}


def stages_to_layer_gpu(stages: Sequence[tuple[int, int]], L: int) -> list[int]:
    """GPU of every layer (index l-1) of a contiguous partition: stage s (first, last) on GPU s."""
    out = [None] * L
    expect = 1
    for s, (a, b) in enumerate(stages):
        if a != expect or b < a or b > L:
            raise ValueError(f"stages {stages} are not a contiguous partition of 1..{L}")
        for l in range(a, b + 1):
            out[l - 1] = s
        expect = b + 1
    if expect != L + 1:
        raise ValueError(f"stages {stages} do not cover layers 1..{L}")
    return out



# ----------------------------------------------------------------------------- K-periodic schedules
@dataclass
class CyclicSchedule(_Allocation):
    """A K-periodic schedule (beyond paper 003, whose Definition 1 has one instance of every task per
    period): mini-batches are processed K per period of length ``K T``, so ``T`` is the average time
    per mini-batch, the quantity compared with a pattern's period and with an eager schedule's
    steady-state period. Mini-batch ``j = r K + i`` (0 <= i < K) runs task T_m at
    ``start[m-1][i] + r K T`` and its communication of A[m] at ``start_c[m-1][i] + r K T``
    (``start_c[m-1]`` is None when T_m and T_{m+1} share a GPU). K = 1 is a pattern with explicit
    mini-batch shifts; PipeDream's eager schedules are K-periodic in steady state for some K (29 for
    ResNet-18 on 8 GPUs at 1.29 GB)."""

    gpu: list[int]
    K: int
    T: float
    start: list[list[float]]
    start_c: list[list[float] | None]
    meta: dict[str, Any] = field(default_factory=dict)

    def span(self) -> float:
        """Time from the first start to the last end of the K mini-batches of one period."""
        flat = [s for row in self.start for s in row]
        return max(flat) - min(flat) + self.K * self.T

    def unroll(self, td: TaskData, n_batches: int) -> Unrolled:
        n, K, P_ = td.n, self.K, self.K * self.T
        j = np.arange(n_batches)
        r, i = j // K, j % K
        tasks, comms = {}, {}
        for m in range(1, n + 1):
            s = np.asarray(self.start[m - 1], dtype=float)[i] + r * P_
            tasks[m] = np.stack([s, s + td.d[m]], axis=1)
        for m in range(1, n):
            row = self.start_c[m - 1]
            if row is None:
                comms[m] = None
            else:
                s = np.asarray(row, dtype=float)[i] + r * P_
                comms[m] = np.stack([s, s + td.dc[m]], axis=1)
        return Unrolled(gpu=list(self.gpu), n_batches=n_batches, tasks=tasks, comms=comms)

    def as_pattern(self, td: TaskData) -> Pattern:
        """A 1-periodic schedule as a :class:`Pattern` (start times taken modulo T, the conventions of
        :func:`normalize_pattern`)."""
        if self.K != 1:
            raise ValueError(f"only a 1-periodic schedule is a pattern (K = {self.K})")
        starts = {m: self.start[m - 1][0] for m in range(1, td.n + 1)}
        starts_c = {m: row[0] for m, row in enumerate(self.start_c, start=1) if row is not None}
        pat = normalize_pattern(self.gpu, starts, starts_c, self.T, td)
        pat.meta.update(self.meta)
        return pat

    def to_json(self) -> dict[str, Any]:
        return {"kind": "pipeline-cyclic", "K": self.K, "period": self.T, "gpu": self.gpu,
                "start": self.start, "start_c": self.start_c,
                "layers_per_gpu": {str(g): self.layers_on(g) for g in self.gpus_used()}, "meta": self.meta}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "CyclicSchedule":
        return cls(gpu=data["gpu"], K=int(data["K"]), T=float(data["period"]), start=data["start"],
                   start_c=data["start_c"], meta=dict(data.get("meta", {})))




def simulate_cyclic(sched: CyclicSchedule, data: TaskData | Chain, bandwidth: float | None = None, *,
                    gpus: int | None = None, n_batches: int | None = None) -> SimResult:
    """Replay a K-periodic schedule: unroll it over ``n_batches`` mini-batches (default: enough for
    every GPU to reach its steady state), check every dependency and the exclusivity of every GPU and
    link, and measure memory with the rules of this module. ``data`` is the :class:`TaskData` (or a
    Chain, with ``bandwidth``). The period is measured over a whole number of periods of K
    mini-batches, so it equals ``sched.T`` when the schedule is valid."""
    td = as_task_data(data, bandwidth)
    n, K = td.n, int(sched.K)
    if K < 1 or len(sched.gpu) != n or len(sched.start) != n or len(sched.start_c) != n - 1:
        raise InvalidPattern(f"cyclic schedule shape does not match L = {td.L} (K = {K})")
    if any(len(row) != K for row in sched.start):
        raise InvalidPattern(f"every task needs K = {K} start times")
    _check_allocation(sched.gpu, sched.T, td, gpus, "schedule")
    for m in range(1, n):
        if (sched.gpu[m - 1] != sched.gpu[m]) != (sched.start_c[m - 1] is not None):
            raise InvalidPattern(f"communication of A[{m}]: start times given iff T_{m} and T_{m + 1} "
                                 f"are on different GPUs")
    if n_batches is None:
        periods = int(math.ceil(sched.span() / (K * sched.T)))
        n_batches = K * (4 * periods + 8) + 1
    un = sched.unroll(td, n_batches)
    k2 = n_batches - 1
    k1 = k2 - K * ((k2 - n_batches // 4) // K)     # a whole number of K-periods of completions
    return check_and_measure(un, td, REL_TOL * sched.T, steady_from=k1)
