"""Train under a byte budget (issue 28).

:func:`compile_under_budget` compiles a model's training step (forward, loss, backward) at several of
PyTorch's ``activation_memory_budget`` fractions, and (``chain=True``, the default) also plans the
model as a chain of stages with memplan's rotor (re-materialization across stages, run eagerly by
:func:`memplan.models.runtime.execute`) and (``compiled_stages=True``, the default) rotor over the same
stages each compiled by ``torch.compile`` (:mod:`memplan.models.compiled`: rotor across stages, the
compiler's partitioner and fused kernels within a stage; ``stage_fractions`` below 1 add chains
whose stages' partitioner runs at that ``activation_memory_budget`` with ``stage_solver``, memplan's
peak-aware keep-or-recompute MILP by default); it runs each candidate, measures its peak
memory and its step time, and returns the fastest one whose measured peak fits the budget in bytes. A budget below
every measured peak is refused (:class:`~memplan.models.solution.InfeasibleError` with the smallest
peak measured, the chain's least-memory plan included), so the refusal happens here and not as an
out-of-memory at run time. :class:`BudgetSearch` keeps the measured candidates to answer several
budgets (``benchmarks/bench_budget.py``).

The peak is measured, never predicted: on CPU with :func:`memplan.models.memory.profiler_peak` (every
allocation through c10's CPU allocator, compiled code included); on CUDA as
``max_memory_allocated() - memory_allocated()`` before the step. Both windows open after the parameters
and their gradients exist (a warm-up step made them), so the peak is what the step adds on top of
parameters, gradients and inputs: activations, saved tensors, temporaries, the gradients' transients.
That is the step of a loop that keeps its gradient buffers (``zero_grad(set_to_none=False)``, or
gradient accumulation). After ``zero_grad()`` with its default ``set_to_none=True`` the gradients are
allocated again inside each step, which can raise the peak by up to the parameters' size (on
``benchmarks/example_compile_budget.py``'s model it did not: the same peak, reached before the first
gradient exists).

``solver="memplan"`` replaces PyTorch's ``dp_knapsack`` inside the partitioner by
:class:`MemplanKnapsack` (:mod:`memplan.formulations.knapsack_milp`): the same knapsack model solved
exactly, MIP-started from ``dp_knapsack``'s answer. ``solver="memplan-peak"`` uses
:class:`MemplanPeakSolver` (:mod:`memplan.formulations.peak_milp`): keep or recompute each candidate
with the step's memory modelled over the joint graph's order (:func:`joint_graph_timeline`), bounded by
the modelled peak of ``dp_knapsack``'s choice, which is its MIP start (never worse in that model).
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from memplan.models.solution import InfeasibleError, InputError
from memplan.models.units import UnitError, fmt_bytes, fmt_memory, parse_bandwidth, parse_memory

#: the default grid of PyTorch's budget fractions (the fractions of issue 28's benchmark, and 0)
DEFAULT_FRACTIONS = (1.0, 0.7, 0.5, 0.3, 0.2, 0.1, 0.05, 0.0)
BACKENDS = ("aot_eager_decomp_partition", "inductor")
SOLVERS = ("pytorch", "memplan", "memplan-peak", "both", "all")
#: where the partitioner's knapsack gets its recompute costs: PyTorch's FLOP count, or each operation
#: timed on the step's device (:mod:`memplan.models.op_timing`)
RUNTIME_ESTIMATORS = ("flops", "measured")
#: the keep-or-recompute solvers of compiled stages at a partitioner budget below 1 (``stage_solver``)
STAGE_SOLVERS = ("pytorch", "memplan", "memplan-peak")
#: :meth:`BudgetSearch.under` times again the fitting candidates whose step time is within this
#: fraction of the fastest one's, the RETIME_MOST fastest of them
RETIME_MARGIN = 0.5
RETIME_MOST = 4
#: a candidate measured above a budget by at most this share is measured again before it is ruled
#: out (:meth:`BudgetSearch.under`): the same step's peak can differ by an allocator block or a
#: workspace between two windows, and a budget set to a measured peak sits exactly on that edge
PEAK_RECHECK = 0.01
#: the CUDA caching allocator's peaks a search can decide on (:func:`_measure`)
CUDA_PEAKS = ("requested", "allocated")


def _cuda_peak_arg(cuda_peak) -> str:
    """``cuda_peak`` when it is one of :data:`CUDA_PEAKS`, else an InputError naming them."""
    if cuda_peak not in CUDA_PEAKS:
        raise InputError(f"compile_under_budget: cuda_peak {cuda_peak!r} is unknown; use one of "
                         f"{', '.join(CUDA_PEAKS)} (which of the CUDA caching allocator's peaks the budget is "
                         "compared with)")
    return cuda_peak


def _flag(value, name: str) -> bool:
    """``value`` when it is a bool, else an InputError naming ``name``: read by its truthiness,
    ``chain='no'`` had run the chain plans."""
    if not isinstance(value, bool):
        raise InputError(f"compile_under_budget: {name} must be True or False, got {value!r}")
    return value


def _tensors_arg(value, name: str, what: str) -> tuple:
    """``value`` (``example_inputs``, ``example_targets``) as a tuple when it is a tuple or a list, else an
    InputError naming ``name``: a tensor would be unpacked row by row, each row taken for an argument."""
    if not isinstance(value, (tuple, list)):
        raise InputError(f"compile_under_budget: {name} must be a tuple or list of {what}, not a "
                         f"{type(value).__name__}")
    return tuple(value)


def _seconds_arg(value, name: str):
    """``value`` when it is None or a positive number of seconds (not a bool, not nan), else an
    InputError naming ``name``."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
        raise InputError(f"compile_under_budget: {name} must be a positive number of seconds or None, got {value!r}")
    return value


def _fraction_list(values, name: str, what: str, empty: bool) -> list[float]:
    """``values`` as floats when it is a list or tuple of distinct numbers in [0, 1] (non-empty unless
    ``empty``), else an InputError naming ``name`` and saying ``what`` they are: a bare number is not
    a list (``fractions=1.0`` failed as 'not iterable'), True is not a fraction, and a fraction given
    twice was compiled and measured twice."""
    ok = isinstance(values, (list, tuple)) and (empty or len(values) > 0)
    if ok and any(isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 <= f <= 1 for f in values):
        ok = False
    if not ok or len({float(f) for f in values}) != len(values):
        raise InputError(f"compile_under_budget: {name} must be a {'' if empty else 'non-empty '}list of distinct "
                         f"numbers in [0, 1] ({what}), got {values!r}")
    return [float(f) for f in values]


def _solver_base():
    """The base of memplan's partitioner solvers, built on first use (torch's ``CustomKnapsackSolver``
    is imported lazily): a time limit and threads for HiGHS, ``calls`` recording each call, and
    PyTorch's own answer to start from."""
    global _SOLVER_BASE
    if _SOLVER_BASE is not None:
        return _SOLVER_BASE
    from torch._inductor.custom_graph_pass import CustomKnapsackSolver

    class MemplanSolver(CustomKnapsackSolver):
        def __init__(self, time_limit: float | None = 10.0, threads: int | None = 1):
            self.time_limit = time_limit
            self.threads = threads
            self.calls: list[dict[str, Any]] = []

        @staticmethod
        def pytorch_choice(memory, max_memory, nodes) -> tuple[list[float], list[int]]:
            """The runtimes PyTorch gives its own solver (it does not pass them to a custom one) and
            ``dp_knapsack``'s saved items at ``max_memory``."""
            from torch._functorch._activation_checkpointing.knapsack import dp_knapsack
            from torch._functorch.partitioners import estimate_runtime

            runtimes = [float(estimate_runtime(node)) for node in nodes]
            _, dp_saved, _ = dp_knapsack(list(memory), runtimes, max_memory)
            return runtimes, dp_saved

    _SOLVER_BASE = MemplanSolver
    return MemplanSolver


def _knapsack_solver_class():
    """:class:`MemplanKnapsack`, built on first use (its base class lives in torch, imported lazily)."""
    global _MEMPLAN_KNAPSACK
    if _MEMPLAN_KNAPSACK is not None:
        return _MEMPLAN_KNAPSACK

    class MemplanKnapsack(_solver_base()):
        """PyTorch's partitioner knapsack (saved vs recomputed candidates under the budget fraction),
        solved exactly by :func:`memplan.formulations.knapsack_milp.solve_knapsack` with PyTorch's own
        ``dp_knapsack`` answer as MIP start, so its objective (recompute runtime, PyTorch's runtime
        estimate) is never worse than ``dp_knapsack``'s in that model. It is a knapsack over saved
        bytes, not a model of the backward's memory over time. ``calls`` records each call:
        items, capacity, both objectives, the solve time."""

        def __call__(self, memory, joint_graph, max_memory, node_info, all_recomputable_banned_nodes):
            from memplan.formulations.knapsack_milp import knapsack_value, solve_knapsack

            t0 = time.perf_counter()
            runtimes, dp_saved = self.pytorch_choice(memory, max_memory, all_recomputable_banned_nodes)
            res = solve_knapsack(list(memory), runtimes, max_memory, start=dp_saved,
                                 time_limit=self.time_limit, threads=self.threads)
            dp_r, dp_m = knapsack_value(memory, runtimes, dp_saved)
            self.calls.append({"items": len(memory), "capacity": float(max_memory),
                               "recompute_runtime": res.recompute_runtime, "dp_recompute_runtime": dp_r,
                               "dp_saved_memory": dp_m, "saved_memory": res.saved_memory,
                               "source": res.source, "seconds": time.perf_counter() - t0})
            return res.saved, res.recomputed

        def uuid(self):
            return "memplan.MemplanKnapsack/1"

    _MEMPLAN_KNAPSACK = MemplanKnapsack
    return MemplanKnapsack


_MEMPLAN_KNAPSACK = None
_PEAK_SOLVER = None
_SOLVER_BASE = None

#: aten operations whose output shares its input's storage: no memory of their own in the peak model
_VIEW_OPS = ("view", "_unsafe_view", "t", "transpose", "permute", "expand", "slice", "select", "unsqueeze",
             "squeeze", "alias", "as_strided", "detach", "split", "unbind", "chunk", "split_with_sizes")


def joint_graph_timeline(joint_graph, node_info, nodes) -> dict[str, Any]:
    """The peak model's data (:mod:`memplan.formulations.peak_milp`) read off PyTorch's joint
    forward-backward graph, in its node order (forward first, then backward):

    - item ``i`` (``nodes[i]``, a candidate of the partitioner's knapsack), size its bytes
      (``_size_of``, PyTorch's own estimate);
    - saved: alive from its definition to its last use, backward users included (no backward user:
      to the end of the step, as it then serves other recomputations, conservatively);
    - recomputed: alive from its definition to its last forward use, and again from its first to its
      last backward use (recomputed just before the first);
    - ``fixed[t]``: every other node's output from its definition to its last use (placeholders, the
      output node and views excluded: parameters, inputs and tangents exist anyway, views share a
      storage), whether the partitioner saves or recomputes it.

    Not modelled: the memory of recomputing an item's own inputs, the order in which the backward
    really runs (the compiled backward is the joint graph's backward part reordered by the
    partitioner), allocator effects. The measured peak decides (``compile_under_budget``)."""
    from torch._functorch.partitioners import _size_of

    order = {n: k for k, n in enumerate(joint_graph.nodes)}
    T = len(order)
    cand = set(nodes)

    def is_view(n) -> bool:
        name = getattr(getattr(n, "target", None), "__name__", "")
        return name.split(".")[0] in _VIEW_OPS

    fixed = [0.0] * (T + 1)                     # a difference array, then prefix sums
    for n in joint_graph.nodes:
        if n in cand or n.op in ("placeholder", "output") or is_view(n):
            continue
        users = [order[u] for u in n.users if u.op != "output"]
        if not users:
            continue
        size = float(_size_of(n))
        fixed[order[n]] += size
        fixed[max(users) + 1] -= size
    run = 0.0
    for t in range(T):
        run += fixed[t]
        fixed[t] = run
    fixed = fixed[:T]
    sizes, saved_iv, recomputed_iv = [], [], []
    for n in nodes:
        d = order[n]
        fw = [order[u] for u in n.users if u.op != "output" and not node_info.is_required_bw(u)]
        bw = [order[u] for u in n.users if u.op != "output" and node_info.is_required_bw(u)]
        fw_last = max(fw, default=d)
        sizes.append(float(_size_of(n)))
        if bw:
            saved_iv.append([(d, max(fw_last, max(bw)))])
            recomputed_iv.append([(d, fw_last), (min(bw), max(bw))])
        else:
            saved_iv.append([(d, T - 1)])
            recomputed_iv.append([(d, fw_last)])
    return {"sizes": sizes, "saved": saved_iv, "recomputed": recomputed_iv, "fixed": fixed}


def _peak_solver_class():
    """:class:`MemplanPeakSolver`, built on first use (its base class lives in torch)."""
    global _PEAK_SOLVER
    if _PEAK_SOLVER is not None:
        return _PEAK_SOLVER

    class MemplanPeakSolver(_solver_base()):
        """The partitioner's keep-or-recompute choice by :func:`memplan.formulations.peak_milp.solve_peak`:
        the step's memory modelled over the joint graph's order (:func:`joint_graph_timeline`), the
        capacity the modelled peak of PyTorch's own ``dp_knapsack`` choice at this fraction, which is
        the MIP start: the answer's modelled peak is no higher and its recompute runtime (PyTorch's
        estimate) no larger than ``dp_knapsack``'s. ``calls`` records each call."""

        def __call__(self, memory, joint_graph, max_memory, node_info, all_recomputable_banned_nodes):
            from memplan.formulations.peak_milp import solve_peak

            t0 = time.perf_counter()
            nodes = list(all_recomputable_banned_nodes)
            runtimes, dp_saved = self.pytorch_choice(memory, max_memory, nodes)
            tl = joint_graph_timeline(joint_graph, node_info, nodes)
            res = solve_peak(tl["sizes"], runtimes, tl["saved"], tl["recomputed"], tl["fixed"], start=dp_saved,
                             time_limit=self.time_limit, threads=self.threads)
            self.calls.append({"items": len(nodes), "segments": res.segments,
                               "recompute_runtime": res.recompute_runtime, "peak": res.peak,
                               "dp_recompute_runtime": res.start_runtime, "dp_peak": res.start_peak,
                               "source": res.source, "seconds": time.perf_counter() - t0})
            return res.saved, res.recomputed

        def uuid(self):
            return "memplan.MemplanPeakSolver/1"

    _PEAK_SOLVER = MemplanPeakSolver
    return MemplanPeakSolver


def memplan_peak_solver(time_limit: float | None = 10.0, threads: int | None = 1):
    """A :class:`MemplanPeakSolver` for ``torch._functorch.config.activation_memory_budget_solver``."""
    return _peak_solver_class()(time_limit=time_limit, threads=threads)


def memplan_knapsack(time_limit: float | None = 10.0, threads: int | None = 1):
    """A :class:`MemplanKnapsack` for ``torch._functorch.config.activation_memory_budget_solver``."""
    return _knapsack_solver_class()(time_limit=time_limit, threads=threads)


#: ``multi_note`` beginnings that say the network needs no chain on multi-tensor cuts, or it was not
#: asked for: left out of :meth:`BudgetedStep.report` (the others: a time limit, a model the search does
#: not cut so, an error)
_MULTI_QUIET = ("not asked for", "the single-tensor cuts are fine enough", "multi-tensor cuts do not lower")


@dataclass
class Candidate:
    """One measured training step. ``kind="compiled"``: ``torch.compile`` at PyTorch's budget
    ``fraction`` with the partitioner's knapsack ``solver`` (``"pytorch"`` or ``"memplan"``);
    ``kind="chain"``: memplan's rotor plan (``solver="rotor"``) for the model cut into a chain,
    solved at ``memory_limit`` bytes of the chain's model (``predicted_peak`` is its simulated peak)
    and run eagerly by :func:`memplan.models.runtime.execute` (``fraction`` is nan);
    ``kind="chain-compiled"``: the same with every stage, the loss stage included, compiled by
    ``torch.compile`` with the search's backend (:mod:`memplan.models.compiled`), on the chain
    profiled with the compiled stages; ``loss_chunks`` > 1: its loss stage over chunks of tokens,
    each chunk compiled; ``kind="chain-offload"``: paper 001's offloading schedule (``solver``
    ``"dynprog"``) on the compiled chain (the eager one without it), every stage's forward kept and
    the values in ``offloaded`` sent to the host and back (:mod:`memplan.models.runtime_offload`);
    ``kind="chain-joint"``: paper 000's joint DP (``solver`` ``"joint-dp"``): recomputation and
    offloading together, its transfers merged into whole values; ``kind="chain-mixed"``: rotor with a
    partitioner budget chosen per stage among the compiled chains (``per_stage``,
    :mod:`memplan.baselines.remat_variants`); ``kind="chain-multi"``: rotor on the chain cut where
    several tensors cross (:meth:`BudgetSearch._build_multi`), run eagerly."""

    solver: str
    fraction: float
    peak: int                         # measured bytes above parameters, gradients and inputs
    step_time: float                  # median seconds of a training step (profiler off; CPU time on one CPU thread)
    step_times: list[float]
    compile_time: float               # compiled: seconds of the first call (trace, partition, compile);
                                      # chain: seconds of the DP solve
    fits: bool = False
    kind: str = "compiled"
    memory_limit: float | None = None
    predicted_peak: float | None = None
    ops: tuple = field(default=(), repr=False)
    loss_chunks: int = 1              # chain: the loss stage over this many slices of the tokens
    stage_fraction: float = 1.0       # chain-compiled: the partitioner budget the stages were compiled at
    stage_solver: str = ""            # chain-compiled, stage_fraction < 1: its keep-or-recompute solver
    loss_grad_in_forward: bool = False  # chain-compiled: the chunks' gradients taken in the forward
    offloaded: tuple = ()             # chain-offload: the indices j of the values abar^j moved to the host
    per_stage: tuple = ()             # chain-mixed: the partitioner budget each stage 1..L+1 was compiled at

    @property
    def plan_key(self) -> tuple:
        """A chain plan's key in :attr:`BudgetSearch.chain_plans` / ``compiled_chain_plans`` /
        ``offload_plans``."""
        if self.kind in ("chain-offload", "chain-joint"):
            return (self.kind, self.stage_fraction, self.offloaded, self.ops)
        if self.kind == "chain-mixed":
            return (self.per_stage, self.loss_chunks, self.loss_grad_in_forward, self.ops)
        if self.kind == "chain-multi":
            return self.ops
        if self.kind == "chain-compiled":
            return (self.stage_fraction, self.loss_chunks, self.loss_grad_in_forward, self.ops)
        return (self.loss_chunks, self.loss_grad_in_forward, self.ops)

    @property
    def label(self) -> str:
        if self.kind in ("chain-offload", "chain-joint"):
            what = "store-all" if self.kind == "chain-offload" else "rotor + offloading"
            return (f"chain {what}{', compiled stages' if not math.isnan(self.stage_fraction) else ''}, "
                    f"{len(self.offloaded)} values offloaded (paper {'001' if self.kind == 'chain-offload' else '000'}), "
                    f"at {fmt_memory(self.memory_limit)}")
        if self.kind == "chain-mixed":
            counts = ", ".join(f"{self.per_stage.count(f)} at {f:g}" for f in sorted(set(self.per_stage), reverse=True))
            return (f"chain rotor, compiled stages at a partitioner budget per stage ({counts}; "
                    f"{self.stage_solver}), at {fmt_memory(self.memory_limit)}"
                    + (f", loss in {self.loss_chunks} chunks" if self.loss_chunks > 1 else "")
                    + (" (gradients in the forward)" if self.loss_grad_in_forward else ""))
        if self.kind == "chain-multi":
            return f"chain {self.solver}, multi-tensor cuts, at {fmt_memory(self.memory_limit)}"
        if self.kind == "chain":
            return (f"chain rotor at {fmt_memory(self.memory_limit)}"
                    + (f", loss in {self.loss_chunks} chunks" if self.loss_chunks > 1 else ""))
        if self.kind == "chain-compiled":
            if self.stage_fraction < 1:
                return (f"chain rotor, compiled stages at partitioner budget {self.stage_fraction:g} "
                        f"({self.stage_solver}), at {fmt_memory(self.memory_limit)}")
            return (f"chain rotor, compiled stages, at {fmt_memory(self.memory_limit)}"
                    + (f", loss in {self.loss_chunks} chunks" if self.loss_chunks > 1 else "")
                    + (" (gradients in the forward)" if self.loss_grad_in_forward else ""))
        return f"{self.solver} fraction {self.fraction:g}"


@dataclass
class BudgetedStep:
    """A training step: ``step(*inputs, *targets)`` runs forward, loss and backward (gradients
    accumulate in the parameters' ``.grad``, as ``loss.backward()`` does) and returns the loss
    (detached). ``kind`` says what it is: ``"compiled"`` (``fraction`` is PyTorch's budget it was
    compiled with), ``"chain"`` (memplan's rotor plan run eagerly, ``fraction`` nan) or
    ``"chain-compiled"`` (rotor's plan over compiled stages); ``peak`` its measured peak,
    ``candidates`` every candidate measured for this budget."""

    budget: int
    fraction: float
    peak: int
    step_time: float
    candidates: list[Candidate]
    backend: str
    solver: str                       # the chosen candidate's knapsack, or "rotor"
    skipped: list[float] = field(default_factory=list)   # fractions not tried (time_limit)
    search_time: float = 0.0
    kind: str = "compiled"
    choice: Candidate | None = None
    chain_note: str = ""              # why chain plans were not tried, if they were not
    compiled_chain_note: str = ""     # why chain plans with compiled stages were not tried (or their loss stage is eager)
    compiled_loss_chunks_note: str = ""   # why the compiled-stage chain has no (or one fewer) chunked loss stage
    offload_note: str = ""            # offload asked for: why a budget got no offloading candidate
    untried: list[str] = field(default_factory=list)   # what the time limit left unsolved for this budget
    loss_chunks_note: str = ""        # why the eager chain has no chunked loss stage
    multi_note: str = ""              # why there are no chain plans on multi-tensor cuts (BudgetSearch._build_multi)
    peak_measure: str = ""            # what every peak here is: the CUDA allocator's requested or allocated peak, or the CPU profiler's
    _fn: Callable = field(repr=False, default=None)
    _config: dict = field(repr=False, default_factory=dict)

    def __call__(self, *args):
        import torch._functorch.config as fconfig

        with fconfig.patch(**self._config):      # a recompile (new shapes) uses the same setting
            return self._fn(*args)

    @property
    def knapsack_calls(self) -> list[dict[str, Any]]:
        """``solver="memplan"``: one record per knapsack the partitioner asked for while compiling
        the returned step (items, capacity, memplan's and ``dp_knapsack``'s recompute runtimes, seconds)."""
        s = self._config.get("activation_memory_budget_solver")
        return list(getattr(s, "calls", []))

    def report(self) -> str:
        what = (f"chose fraction {self.fraction:g}" if self.kind == "compiled"
                else f"chose {self.choice.label if self.choice else 'a chain plan'}")
        lines = [f"budget {fmt_memory(self.budget)}: {what} "
                 f"(peak {fmt_memory(self.peak)}, step {self.step_time * 1e3:.2f} ms: the returned step, "
                 f"measured again), backend {self.backend}, solver {self.solver}, search {self.search_time:.1f} s"
                 + (f"; peaks: {self.peak_measure}" if self.peak_measure else "")]
        if self.candidates:
            lines.append("  candidates, as measured during the search (median step of its timings):")
        width = max([32] + [len(c.label) for c in self.candidates])
        for c in self.candidates:
            lines.append(f"  {c.label:<{width}} peak {fmt_memory(c.peak):>10}  step "
                         f"{c.step_time * 1e3:8.2f} ms  {'compile' if c.kind == 'compiled' else 'solve  '} "
                         f"{c.compile_time:6.2f} s  {'fits' if c.fits else 'over'}")
        if self.skipped:
            lines.append(f"  not tried (time_limit): {', '.join(f'{f:g}' for f in self.skipped)}")
        if self.untried:
            lines.append(f"  not solved and measured for this budget (time_limit): {', '.join(self.untried)}")
        if "time_limit" in self.loss_chunks_note:      # the other reasons are the network's, said elsewhere
            lines.append(f"  chunked loss stage: {self.loss_chunks_note}")
        if self.chain_note:
            lines.append(f"  chain plans: {self.chain_note}")
        if self.compiled_chain_note:
            lines.append(f"  chain plans with compiled stages: {self.compiled_chain_note}")
        if self.compiled_loss_chunks_note and not (self.compiled_loss_chunks_note.startswith("no chunked loss stage")
                                                   and "time_limit" not in self.compiled_loss_chunks_note):
            # (no eager chunked stage either: said above where the time limit is why, else the network's)
            lines.append(f"  compiled stages, chunked loss stage: {self.compiled_loss_chunks_note}")
        if self.multi_note and not self.multi_note.startswith(_MULTI_QUIET):
            lines.append(f"  chain plans on multi-tensor cuts: {self.multi_note}")
        if self.offload_note:
            lines.append(f"  offloading: {self.offload_note}")
        return "\n".join(lines)


def _fresh_step(model, loss_fn, n_inputs: int, tag: str):
    """``step(*args) -> loss``: forward + loss + backward, with its own code object so that each
    candidate has its own ``torch.compile`` cache (Dynamo keys its cache on the code object; the budget
    fraction is not part of its guards)."""

    def forward_loss(*args):
        out = model(*args[:n_inputs])
        return loss_fn(out, *args[n_inputs:]) if loss_fn is not None else out

    fresh = types.FunctionType(forward_loss.__code__.replace(co_name=f"memplan_step_{tag}"),
                               forward_loss.__globals__, f"memplan_step_{tag}", None,
                               forward_loss.__closure__)
    return fresh


#: how the eager chains of the search are profiled on a CPU: with the method every candidate's step is
#: measured with (:func:`_measure`, c10's allocator events), which also sees kernels' scratch buffers
#: that the dispatch-mode tracker does not (a 9 MiB buffer of the CPU convolutions' backward on the
#: quick ResNet-50: every eager chain plan measured 9,437,184 bytes over its replay, 40-94%)
_CHAIN_MEMORY = "profiler"


def _measure(run, device, stats: dict | None = None, cuda_peak: str = "requested") -> int:
    """The measured peak of ``run()`` (bytes above what existed before it). On CUDA, ``cuda_peak``
    says which of the caching allocator's peaks: ``"requested"`` (the bytes the tensors asked for,
    :attr:`memplan.models.memory.CudaMemoryTracker.requested_peak`) or ``"allocated"``
    (``max_memory_allocated``: those bytes rounded to 512 and, where a cached block was reused
    without being split, its unsplit rest, under 1 MiB per block). ``stats``, when given, receives
    both (``"requested"``, ``"allocated"``). On a CPU there is one method (the profiler's view of
    c10's allocator) and ``cuda_peak`` is not used.

    Why requested is the default: the allocated peak of one step depends on what the cache held
    before the window (which blocks get reused unsplit), so the same step measured in two windows of
    one process differed by up to 0.09% on an H100 (ResNet-50, batch 32: 1,578,223,104 B in the
    benchmark's window, 1,578,419,712 and 1,579,664,896 B in the search's), and a budget set to
    one window's reading refused the very step measured there. The requested bytes leave that out
    and depend only on the tensors the step creates."""
    from memplan.models.memory import CudaMemoryTracker, profiler_peak

    if device.type == "cuda":               # max_memory_allocated - base, after synchronizes
        # from the same cache state in every window: with the cache emptied, what is left is the free
        # rest of segments that hold parameters, gradients and inputs, the same each time. With a warm
        # cache a block's unsplit rest (< 1 MiB) depends on the cache's history, and an H100 measured
        # one GPT-2 step 0.005% apart in two windows (a budget set to one window's peak then refused the
        # very step measured there); bench_budget's peak_window_spread shows whether this removes it
        import torch

        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        _cuda_peak_arg(cuda_peak)
        with CudaMemoryTracker(device) as tr:
            run()
            tr.sync()
            both = {"requested": int(tr.requested_peak), "allocated": int(tr.peak)}
            if stats is not None:
                stats.update({k: float(v) for k, v in both.items()})
            return both[cuda_peak]
    if device.type != "cpu":
        raise InputError(f"compile_under_budget: cannot measure memory on device {device.type!r} (cpu or cuda)")
    _, peak, _ = profiler_peak(run)
    return int(peak)


class _Preserved:
    """Puts the parameters' gradients and the model's buffers (batch norm's running statistics) back
    as they were when the block was entered: a search runs training steps."""

    def __init__(self, model, params):
        self.model, self.params = model, params

    def __enter__(self):
        self.grads = [None if p.grad is None else p.grad.detach().clone() for p in self.params]
        self.buffers = [(b, b.detach().clone()) for b in self.model.buffers()]
        return self

    def __exit__(self, *exc):
        import torch

        with torch.no_grad():
            for p, g in zip(self.params, self.grads):
                p.grad = g
            for b, v in self.buffers:
                b.copy_(v)
        return False


def _multi_solve(chain, limit: float, seconds: float | None):
    """``(schedule, replay, name)``: the faster of rotor's persistent plan at ``limit`` (paper 004,
    planned on ``chain.without_resident()`` under ``limit`` less the resident tensors, charged whole)
    and the fastest baseline whose replay fits ``limit``
    (:func:`memplan.baselines.remat_heuristics.replayed_baselines`: the replay charges them only while
    they exist, so near the least memory of a chain cut where several tensors cross a baseline can fit
    where rotor has no plan); None where neither fits. What :func:`memplan.remat.solve` returns for
    rotor, without its notes."""
    from memplan.baselines.remat_heuristics import replayed_baselines
    from memplan.baselines.remat_rotor import persistent
    from memplan.models.remat import simulate_remat

    found = []
    r = float(chain.resident)                 # as memplan.remat.solve plans it (_frontend.solve_without_resident)
    sol = persistent(chain.without_resident(), max(float(limit) - r, 1.0), time_limit=seconds) if limit > r else None
    if sol is not None and sol.success:
        found.append((sol.schedule, simulate_remat(chain, sol.schedule), "rotor"))
    best, _ = replayed_baselines(chain, float(limit), time_left=seconds)
    if best is not None:
        found.append((best[1], best[2], best[0]))
    return min(found, key=lambda f: f[1].makespan, default=None)


def _multi_least(chain, seconds: float | None) -> float:
    """The least memory known to fit on ``chain`` (:func:`_multi_solve`'s): rotor's minimum with the
    resident tensors charged whole, or the least replayed peak of a baseline where lower."""
    from memplan.baselines.remat_heuristics import replayed_baselines
    from memplan.baselines.remat_min_memory import min_memory

    _, least = replayed_baselines(chain, math.inf, time_left=seconds)
    whole = float(min_memory(chain.without_resident())) + float(chain.resident)
    return whole if least is None else min(whole, float(least[2].peak_memory))


class BudgetSearch:
    """The measured candidates of one model's training step, searched once and then asked for any
    number of byte budgets (:meth:`under`); :func:`compile_under_budget` is one search and one
    question. The parameters are those of :func:`compile_under_budget`.

    On construction: every fraction of the grid is compiled, run under the profiler and timed (the
    compiled steps are kept). With ``chain=True`` the model is also cut into a chain of stages
    (:func:`memplan.models.graph.linearize_model`) and the chain is profiled
    (:func:`memplan.models.profiler.profile_chain`, sizes measured by the dispatch-mode tracker, times
    in context); for each budget :meth:`under` then solves rotor
    (:func:`memplan.baselines.remat_rotor.persistent`, paper 004's persistent DP) and measures the plan
    run by :func:`memplan.models.runtime.execute` with the same profiler as the compiled steps. The
    chain's model and the measurement differ a little (the input copy, allocator-level temporaries):
    where the measured peak is over the budget, the limit given to rotor is lowered by the excess and
    the plan solved and measured again (up to 4 tries). Chain plans need one input tensor and a
    ``loss_fn``; a model that cannot be traced or cut gets none (``chain_note`` says why).

    With ``compiled_stages=True`` (and a chain) the chain's stages and loss stage are also compiled by
    ``torch.compile`` with ``backend`` and profiled with c10's allocator events
    (:meth:`_build_compiled_chain`); :meth:`under` then also measures rotor's plan on that chain
    (kind ``"chain-compiled"``): rotor decides across stages, the compiler's partitioner and fusion
    within each. ``compiled_chain_note`` says why there are none, when there are none.

    ``stage_fractions`` (default ``(1.0,)``: the partitioner's own choice in every stage) builds one
    compiled chain per fraction: every stage, the loss stage included, compiled with
    ``activation_memory_budget`` at that fraction and ``stage_solver`` as the partitioner's
    keep-or-recompute solver (default ``"memplan-peak"``, :class:`MemplanPeakSolver`; ``"pytorch"``:
    ``dp_knapsack``; ``"memplan"``: :class:`MemplanKnapsack`), each profiled on its own and offered to
    rotor: a stage's F_all then saves fewer bytes (``wabar``) and recomputes more in its backward. Each
    chain's plans are candidates, and with two chains or more so are plans that take each stage from
    the chain rotor's DP picks for it (:meth:`mixed_plan`: every stage's F_all runs once in rotor's
    persistent sequences, so the choice is one per stage and the DP stays exact); the measured peaks
    choose. Each extra chain costs a compile per stage and grad mode; one that would
    overrun ``time_limit`` (estimated as the previous chain's build time) is not built
    (``compiled_chain_notes``).

    A language model's loss stage (its head folded into the loss) can also be computed over chunks of
    tokens, the logits recomputed chunk by chunk in the backward
    (:class:`memplan.models.chunked_loss.ChunkedHeadLoss`), when ``loss_fn`` is a
    :class:`~memplan.models.chunked_loss.TokenLoss`: chains with that loss stage are profiled where it
    lowers the least memory, one per chunk count on the way down to the least (:meth:`_build_chunked`,
    ``loss_chunks``), rotor is solved on each and the plan with the smallest predicted makespan is
    measured; its label names the chunks. The
    compiled-stage chain (at the first stage fraction) gets the same variant with each chunk compiled,
    and for a linear head one more whose chunks take their gradients in the forward
    (:meth:`_build_compiled_chunked`, ``compiled_loss_chunks``): below the whole compiled loss stage's
    floor its plans are compiled ones too; ``compiled_loss_chunks_note`` says why a variant is missing."""

    _context = None      # the chain's models.graph.ContextInputs: the model's inputs after the first

    def __init__(self, model, example_inputs: Sequence[Any], *, loss_fn: Callable | None = None,
                 example_targets: Sequence[Any] = (), backend: str = "aot_eager_decomp_partition",
                 solver: str = "pytorch", fractions: Sequence[float] | None = None, repeats: int = 3,
                 solver_time_limit: float | None = 10.0, time_limit: float | None = None,
                 chain: bool = True, compiled_stages: bool = True,
                 stage_fractions: Sequence[float] = (1.0,), stage_solver: str = "memplan-peak",
                 runtime_estimator: str = "flops", progress: Callable[[str], None] | None = None,
                 offload: bool | str = False, bandwidth: float | str | None = None,
                 cuda_peak: str = "requested"):
        import torch

        self.cuda_peak = _cuda_peak_arg(cuda_peak)
        chain = _flag(chain, "chain")
        compiled_stages = _flag(compiled_stages, "compiled_stages")
        example_inputs = _tensors_arg(example_inputs, "example_inputs", "the model's inputs, e.g. (x,)")
        example_targets = _tensors_arg(example_targets, "example_targets",
                                       "the targets loss_fn takes after the model's output, e.g. (y,)")
        if loss_fn is not None and not callable(loss_fn):
            raise InputError(f"compile_under_budget: loss_fn must be a function loss_fn(output, *targets) -> scalar "
                             f"tensor (e.g. torch.nn.functional.cross_entropy), or None when the model returns its "
                             f"loss; got a {type(loss_fn).__name__}")
        if loss_fn is None and example_targets:
            raise InputError("compile_under_budget: example_targets are passed to loss_fn, and loss_fn is None (the "
                             "model's output taken as the loss); give loss_fn, or leave example_targets out")
        if runtime_estimator not in RUNTIME_ESTIMATORS:
            raise InputError(f"compile_under_budget: runtime_estimator {runtime_estimator!r} is unknown; use one of "
                             f"{', '.join(RUNTIME_ESTIMATORS)}")
        if backend not in BACKENDS:
            raise InputError(f"compile_under_budget: backend {backend!r} is not supported; use one of "
                             f"{', '.join(BACKENDS)}")
        if not (isinstance(offload, bool) or (isinstance(offload, str) and offload == "emulated")):   # 1 == True
            raise InputError(f"compile_under_budget: offload must be False, True (a CUDA device) or 'emulated' "
                             f"(the host emulated on a CPU, for tests), got {offload!r}")
        if offload and not chain:
            raise InputError("compile_under_budget: offload's plans run on the chain, and chain=False leaves it out; "
                             "give one of the two")
        if bandwidth is not None and not offload:
            raise InputError(f"compile_under_budget: bandwidth {bandwidth!r} is the host link of offload, which is "
                             f"False; pass offload=True (a CUDA device) or 'emulated', or leave bandwidth None")
        if bandwidth is not None:
            try:
                bandwidth = float(parse_bandwidth(bandwidth))
            except (UnitError, ValueError) as e:
                raise InputError(f"compile_under_budget: bandwidth {bandwidth!r}: {e}") from None
            if not bandwidth > 0:
                raise InputError(f"compile_under_budget: bandwidth must be positive, got {bandwidth!r}")
        if progress is not None and not callable(progress):
            raise InputError(f"compile_under_budget: progress must be a function of one line of text (e.g. "
                             f"print) or None, got {type(progress).__name__}")
        if solver not in SOLVERS:
            raise InputError(f"compile_under_budget: solver {solver!r} is unknown; use one of {', '.join(SOLVERS)}")
        if not isinstance(model, torch.nn.Module):
            raise InputError(f"compile_under_budget: model must be a torch.nn.Module, got {type(model).__name__}")
        fracs = (list(DEFAULT_FRACTIONS) if fractions is None else
                 _fraction_list(fractions, "fractions", "empty: chain plans only", empty=True))
        if not fracs and not chain:
            raise InputError("compile_under_budget: fractions is empty and chain=False: nothing to try")
        if not fracs and solver != "pytorch":
            raise InputError(f"compile_under_budget: solver {solver!r} is the partitioner's solver for the compiled "
                             f"fractions, and fractions is empty; give fractions, or leave solver at 'pytorch'")
        time_limit = _seconds_arg(time_limit, "time_limit")
        solver_time_limit = _seconds_arg(solver_time_limit, "solver_time_limit")
        if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
            raise InputError(f"compile_under_budget: repeats must be a whole number >= 1, got {repeats!r}")
        sfr = _fraction_list(stage_fractions, "stage_fractions", "1: the partitioner's default", empty=False)
        if sfr != [1.0] and not (chain and compiled_stages):
            raise InputError(f"compile_under_budget: stage_fractions {stage_fractions!r} are budgets of the chain's "
                             f"compiled stages, and {'chain' if not chain else 'compiled_stages'}=False leaves them "
                             f"out; give one of the two")
        if stage_solver not in STAGE_SOLVERS:
            raise InputError(f"compile_under_budget: stage_solver {stage_solver!r} is unknown; use one of "
                             f"{', '.join(STAGE_SOLVERS)}")
        if stage_solver != "memplan-peak" and min(sfr) >= 1:      # memplan-peak: the default, not asked for
            raise InputError(f"compile_under_budget: stage_solver {stage_solver!r} is the solver inside stages "
                             f"compiled at a stage fraction below 1, and stage_fractions has none; add one (e.g. "
                             f"stage_fractions=(1.0, 0.5)), or leave stage_solver out")
        if runtime_estimator != "flops" and not fracs and min(sfr) >= 1:
            raise InputError(f"compile_under_budget: runtime_estimator {runtime_estimator!r} weighs the partitioner's "
                             f"recomputations in the compiled fractions and in stages compiled at a stage fraction "
                             f"below 1, and there are none; give fractions, or leave runtime_estimator at 'flops'")
        self.stage_fractions = sfr
        self.stage_solver = stage_solver
        self.model, self.loss_fn, self.backend, self.solver = model, loss_fn, backend, solver
        self.repeats, self.solver_time_limit, self.time_limit = repeats, solver_time_limit, time_limit
        self.runtime_estimator = runtime_estimator
        self.estimator = None                  # the measured estimator, one for every compile (its cache)
        if runtime_estimator == "measured":
            from memplan.models.op_timing import measured_estimator

            self.estimator = measured_estimator()
        self.inputs = tuple(example_inputs) + tuple(example_targets)
        self.n_inputs = len(tuple(example_inputs))
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise InputError("compile_under_budget: the model has no parameter that requires a gradient")
        self.device = self.params[0].device
        self.peak_measure = (f"the CUDA caching allocator's {cuda_peak} bytes" if self.device.type == "cuda"
                             else "the profiler's view of c10's CPU allocator")
        if cuda_peak != "requested" and self.device.type != "cuda":
            raise InputError(f"compile_under_budget: cuda_peak {cuda_peak!r} reads the CUDA caching allocator, and the "
                             f"model is on {self.device.type}; leave cuda_peak at 'requested' (one method on a CPU: "
                             f"the profiler's view of c10's allocator)")
        if offload is True and self.device.type != "cuda":
            raise InputError("compile_under_budget: offload=True needs the model on a CUDA device: on a CPU the "
                             "host is the same memory (offload='emulated' runs the plans with the host emulated, "
                             "for tests)")
        self.t_start = time.perf_counter()
        self.compiled: list[tuple[Candidate, Callable, dict]] = []
        self.chain_plans: dict[tuple, tuple[Candidate, Callable]] = {}
        self.skipped: list[float] = []
        self.chain_note = "" if chain else "not asked for (chain=False)"
        self._chain = None                     # (stages, loss stage, targets holder, chain, min memory)
        self._chunked = None                   # (loss chunks, chunked loss stage, its chain, min memory)
        self._chunked_fewer: list[tuple] = []  # the same at fewer chunks (faster, more memory), by count
        self._pending_chunks: list[int] = []   # those counts, until _build_fewer_chunks profiles them
        self._chunk_seconds = 0.0              # how long the least-memory count's chain took to profile
        self.loss_chunk_minima: dict[int, float] = {}   # chunks -> the chain's least memory (bytes)
        self.loss_chunks_note = ""
        self._offset = 0.0                     # largest measured - simulated peak of a chain plan so far
        self._solved: dict[tuple, Any] = {}    # rotor's answers by (loss chunks, limit)
        # chain plans with compiled stages (kind "chain-compiled"), one chain per stage fraction: the
        # same four keyed by the fraction first, and why there are none
        self._cchains: dict[float, tuple] = {}
        self.compiled_chain_plans: dict[tuple, tuple[Candidate, Callable]] = {}   # (stage fraction, chunks, ops)
        # paper 001's offloading on the chain (offload=True on CUDA, or 'emulated'): its plans, the
        # excess of a measured over a simulated peak so far, the link, and why there are none
        self.offload = offload
        self.offload_plans: dict[tuple, tuple[Candidate, Callable]] = {}
        self.offload_schedules: dict[tuple, Any] = {}    # the same keys: each executed transfer schedule
        self._off_offsets: dict[str, float] = {}
        self._transfer_solvers: dict[str, tuple] = {}    # kind -> _transfer_solver's answer
        self.bandwidth = bandwidth
        self.link001 = None          # (to the host, to the device) where both were measured (CUDA)
        self.offload_note = "" if offload else "not asked for"
        self._offload = None                   # (stages, loss stage, targets holder, chain, view indices, stage fraction)
        self._coffsets: dict[float, float] = {}
        self._csolved: dict[tuple, Any] = {}
        # a partitioner budget chosen per stage (kind "chain-mixed", two compiled chains or more)
        self.mixed_plans: dict[tuple, tuple[Candidate, Callable]] = {}
        self._msolved: dict[float, Any] = {}
        self._moffset = 0.0
        # chain plans on multi-tensor cuts (kind "chain-multi", :meth:`_build_multi`): the chain
        # (stages, loss stage, chain, least memory known to fit), its answers by limit, its plans, the
        # largest excess of a measured over a simulated peak, and why there is none
        self._multi = None
        self._multi_pending = None
        self._xsolved: dict[float, Any] = {}
        self.multi_plans: dict[tuple, tuple[Candidate, Callable]] = {}
        self._xoffset = 0.0
        self.multi_note = "" if chain else "not asked for (chain=False)"
        self._mmin: float | None = None
        self.compiled_chain_note = "" if chain and compiled_stages else "not asked for"
        self._cchunked: list[tuple] = []       # (loss chunks, compiled chunked loss stage, its chain, min memory)
        self.compiled_loss_chunks_note = "" if chain and compiled_stages else "not asked for"
        self.compiled_chain_notes: dict[float, str] = {}
        self.compiled_profile_times: dict[float, float] = {}
        self.stage_solver_calls: dict[float, list] = {}    # stage fraction < 1 -> its solver's calls
        self.profile_time = 0.0
        self.rechecked: list[tuple[str, int, int]] = []   # the last under(): (label, peak, peak measured again)
        self._longest_measure = 0.0               # seconds of the longest _measure_step so far
        self._fit_deadline: float | None = None   # under()'s deadline while it runs (None: no limit)
        self._fit_cut: list[str] = []             # what under()'s deadline left untried, this call
        self._fit_limit: float | None = None      # the seconds that deadline came from (for messages)

        self._progress = progress or (lambda line: None)
        self._slowest = 0.0                    # the longest compile + measurement of the grid so far
        self._n_steps = 0                      # compiled steps built (each one's unique name)
        with _Preserved(model, self.params):
            self._check_loss()
            # the first fraction (PyTorch's own compile at the default fractions: the baseline), then
            # memplan's chains, then the other fractions while time_limit allows: on a GPU one Inductor
            # compile of GPT-2 small took 21-37 s, and fractions first left no time for the chains
            self._compile_grid(fracs[:1])
            if chain:
                if self._past(self._build_deadline):
                    self.chain_note = f"not tried within time_limit={time_limit:g} s"
                    if compiled_stages:
                        self.compiled_chain_note = self.compiled_loss_chunks_note = self.chain_note
                else:
                    self._build_chain()
                    self._progress(f"chain: L = {self._chain[3].L} stages profiled"
                                   + (f", the loss in {self._chunked[0]} chunks too" if self._chunked else "")
                                   + f" ({self.profile_time:.1f} s)" if self._chain else
                                   f"chain: not available ({self.chain_note})")
                    if compiled_stages and self._chain is not None:
                        self._build_compiled_chains()
                        for sf in self.stage_fractions:
                            what = "compiled stages" + (f" at partitioner budget {sf:g}" if sf < 1 else "")
                            self._progress(f"{what}: profiled ({self.compiled_profile_times[sf]:.1f} s)"
                                           if sf in self._cchains else
                                           f"{what}: not available ({self.compiled_chain_notes.get(sf, '')})")
                    elif compiled_stages:
                        self.compiled_chain_note = "no chain to compile (see chain_note)"
                        self.compiled_loss_chunks_note = self.compiled_chain_note
                    self._build_fewer_chunks()
                    self._build_multi()
            if offload:
                self._setup_offload()
            self._compile_grid(fracs[1:])
        if not self.compiled and self._chain is None:
            raise InputError(f"compile_under_budget: nothing to try: fractions is empty and chain plans are not "
                             f"available ({self.chain_note})")

    # -- set-up ------------------------------------------------------------------------------------
    def _check_loss(self) -> None:
        """The model's forward and the loss run once eagerly on the examples, before anything is compiled
        or traced, their errors turned into one InputError naming what was given and quoting the error's
        first line: float token ids, ids outside the vocabulary, a sequence past the context, targets of
        another shape or none had failed as torch's own errors (or a missing argument, an AttributeError
        of None) from the first compile. Without autograd: a step whose eager backward does not fit the
        device is one the search is for. The random states are put back (dropout draws no mask of the
        search's), the buffers by the caller (:class:`_Preserved`)."""
        import torch

        from memplan.models.graph import _python_draws

        devices = [self.device] if self.device.type == "cuda" else []
        put_back = _python_draws()         # Python's and NumPy's generators too (a layer drop drawn there)
        try:
            with torch.no_grad(), torch.random.fork_rng(devices=devices):
                try:
                    out = self.model(*self.inputs[:self.n_inputs])
                except Exception as e:  # noqa: BLE001 - any error of the model on these inputs: reported as such
                    raise InputError(f"compile_under_budget: model(*example_inputs) failed ({_error_line(e, None)}); "
                                     f"example_inputs must be the model's inputs as in training (dtypes, shapes, value "
                                     f"ranges, device)") from e
                try:
                    probe = self.loss_fn(out, *self.inputs[self.n_inputs:]) if self.loss_fn is not None else out
                except Exception as e:  # noqa: BLE001 - the same for the loss on the model's output
                    raise InputError(f"compile_under_budget: loss_fn(output, *example_targets) failed "
                                     f"({_error_line(e, None)}); example_targets must be what loss_fn takes after the "
                                     f"model's output, e.g. (y,)") from e
        finally:
            put_back()
        if not (isinstance(probe, torch.Tensor) and probe.numel() == 1):
            raise InputError("compile_under_budget: the loss must be a scalar tensor: pass loss_fn "
                             "(loss_fn(output, *targets)) when the model does not return its loss")

    def _config_for(self, frac: float, knapsack: str) -> dict:
        cfg = {"activation_memory_budget": float(frac)}
        if self.estimator is not None:
            cfg["activation_memory_budget_runtime_estimator"] = self.estimator
        if knapsack == "memplan":
            cfg["activation_memory_budget_solver"] = memplan_knapsack(time_limit=self.solver_time_limit)
        elif knapsack == "memplan-peak":
            cfg["activation_memory_budget_solver"] = memplan_peak_solver(time_limit=self.solver_time_limit)
        return cfg

    def _sync(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @property
    def _deadline(self) -> float | None:
        """``time_limit`` as a ``time.perf_counter()`` value (None without one): the end of the whole
        call of :func:`compile_under_budget` (the search and its first :meth:`under`)."""
        return None if self.time_limit is None else self.t_start + self.time_limit

    def _step_estimate(self) -> float:
        """Seconds of one training step, for the time accounts: the slowest median measured so far,
        else the built chains' store-all time in their model (0 before anything is known)."""
        times = [c.step_time for c in self.measured()]
        times += [c[3].store_all_time() for c in ([self._chain] if self._chain else []) + list(self._cchains.values())]
        return float(max(times, default=0.0))

    def _measure_cost(self) -> float:
        """Seconds to measure one candidate (:meth:`_measure_plan`: a warm-up step, the peak's window and
        ``repeats`` timed steps): the longest measurement so far (the peak's window costs more than a
        step: the profiler starts and stops), or ``repeats`` + 1 steps of :meth:`_step_estimate`,
        whichever is longer, plus the warm-up step."""
        step = self._step_estimate()
        return max(self._longest_measure, (int(self.repeats) + 1) * step) + step

    def _reserve(self) -> float:
        """Seconds the search keeps for :meth:`under` out of ``time_limit``: one chain plan for the budget
        measured and the chosen step measured again."""
        return 2 * self._measure_cost()

    @property
    def _build_deadline(self) -> float | None:
        """The deadline of the search's own parts (the chain profiles): ``time_limit`` less
        :meth:`_reserve`."""
        return None if self.time_limit is None else self.t_start + self.time_limit - self._reserve()

    def _past(self, deadline: float | None, need: float = 0.0) -> bool:
        """Whether ``need`` more seconds from now would pass ``deadline`` (None: never)."""
        return deadline is not None and time.perf_counter() + need > deadline

    def _no_time_for(self, what: str, need: float | None = None) -> bool:
        """In :meth:`under` with a deadline: whether ``need`` seconds (default: one candidate measured,
        :meth:`_measure_cost`) plus measuring the chosen step again would pass it; ``what`` is then
        recorded as not tried (once), for a refusal to say."""
        if self._fit_deadline is None:
            return False
        need = self._measure_cost() if need is None else need
        if not self._past(self._fit_deadline, need + self._measure_cost()):
            return False
        if what not in self._fit_cut:
            self._fit_cut.append(what)
        return True

    def _solver_seconds(self) -> float | None:
        """A rotor solve's time limit: ``solver_time_limit``, within :meth:`under`'s deadline (less the
        chosen step's measurement) where there is one."""
        if self._fit_deadline is None:
            return self.solver_time_limit
        left = max(1e-3, self._fit_deadline - time.perf_counter() - self._measure_cost())
        return left if self.solver_time_limit is None else min(self.solver_time_limit, left)

    def _clock_name(self) -> str:
        """The clock of the chain profiles and of the candidates' timings: ``"cpu"`` (the process's CPU
        time) on a CPU running one thread, ``"wall"`` otherwise (:data:`memplan.models.measure.CLOCKS`)."""
        import torch

        return "cpu" if self.device.type == "cpu" and torch.get_num_threads() == 1 else "wall"

    def _clock(self) -> Callable[[], float]:
        """What candidates are timed with (:meth:`_measure_step`, :meth:`_retime`)."""
        from memplan.models.measure import CLOCKS

        return CLOCKS[self._clock_name()]

    def _measure_step(self, step, cfg) -> tuple[int, list[float]]:
        """The step's measured peak and ``repeats`` step times. On a CPU running one thread the times
        are the process's CPU time (``time.process_time``, as the chain's profile and the benchmark
        take them): on a shared machine the wall clock also counts other programs' load, which made
        the search rank candidates 5-6% apart in the wrong order (ResNet-50 with Inductor)."""
        import torch._functorch.config as fconfig

        clock = self._clock()
        t0 = time.perf_counter()
        with fconfig.patch(**cfg):
            peak = _measure(lambda: step(*self.inputs), self.device, cuda_peak=self.cuda_peak)
            ts = [self._timed_run(step, clock) for _ in range(int(self.repeats))]
        self._longest_measure = max(self._longest_measure, time.perf_counter() - t0)
        return peak, ts

    def _measure_plan(self, step, predicted: float | None = None) -> tuple[int, list[float]]:
        """A chain plan's step measured as :meth:`_measure_step` does, after a warm-up run (first-call
        allocations, the gradients), the model's gradients and buffers put back afterwards. A peak 1% or
        more below the replay's ``predicted`` is measured once more and the larger kept: c10's profiler
        can miss a block (its "Memory block of unknown size" warning; a dict-output MLP's least plan
        measured 147456 B of its replay's 278528 once, then above that budget when run again, so the
        budget it had been chosen for was refused)."""
        with _Preserved(self.model, self.params):
            step(*self.inputs)
            peak, ts = self._measure_step(step, {})
            if predicted is not None and peak < float(predicted) * 0.99:
                peak = max(peak, _measure(lambda: step(*self.inputs), self.device, cuda_peak=self.cuda_peak))
            return peak, ts

    def _timed_run(self, step, clock) -> float:
        """Seconds of one ``step(*inputs)`` on ``clock``, between synchronizes on CUDA."""
        self._sync()
        t0 = clock()
        step(*self.inputs)
        self._sync()
        return clock() - t0

    def _compile_grid(self, fracs: list[float]) -> None:
        import torch
        import torch._functorch.config as fconfig

        knapsacks = {"both": ("pytorch", "memplan"), "all": ("pytorch", "memplan", "memplan-peak")}.get(
            self.solver, (self.solver,))
        plan = [(frac, knapsack) for frac in fracs for knapsack in knapsacks]
        for k, (frac, knapsack) in enumerate(plan):
            # twice the slowest so far: one compile can take 1.5-2x another's; then the time kept for
            # the chain's plan for the budget and the chosen step's last measurement
            if self.compiled and self._past(self._deadline, 2 * self._slowest + self._reserve()):
                self.skipped = list(dict.fromkeys(self.skipped + [float(f) for f, _ in plan[k:]]))
                self._progress(f"fractions {', '.join(f'{f:g}' for f in self.skipped)}: not tried within "
                               f"time_limit={self.time_limit:g} s")
                break
            t0 = time.perf_counter()
            cfg = self._config_for(frac, knapsack)
            compiled = torch.compile(_fresh_step(self.model, self.loss_fn, self.n_inputs,
                                                 f"{id(self.model):x}_{id(self):x}_{self._n_steps}"),
                                     backend=self.backend)
            self._n_steps += 1

            def step(*args, compiled=compiled):
                loss = compiled(*args)
                loss.backward()
                return loss.detach()

            with fconfig.patch(**cfg):
                t1 = time.perf_counter()
                step(*self.inputs)                 # compiles; creates the gradients if missing
                self._sync()
                compile_time = time.perf_counter() - t1
            peak, ts = self._measure_step(step, cfg)
            self._slowest = max(self._slowest, time.perf_counter() - t0)
            self.compiled.append((Candidate(knapsack, float(frac), peak, statistics.median(ts), ts, compile_time),
                                  step, cfg))
            self._progress(f"fraction {frac:g} ({knapsack}): compiled in {compile_time:.1f} s, peak "
                           f"{fmt_memory(peak)}, {statistics.median(ts) * 1e3:.1f} ms a step "
                           f"({time.perf_counter() - self.t_start:.0f} s into the search)")

    def _build_chain(self) -> None:
        import torch

        from memplan.baselines.remat_min_memory import min_memory
        from memplan.models.graph import linearize_model
        from memplan.models.profiler import profile_chain

        x = self.inputs[0] if self.inputs else None
        if self.loss_fn is None:
            self.chain_note = "need loss_fn (the chain's last stage is the loss of the model's output)"
            return
        if not isinstance(x, torch.Tensor):
            self.chain_note = "need a tensor as the model's first input (the chain's a^0)"
            return
        t0 = time.perf_counter()
        holder = [tuple(self.inputs[self.n_inputs:])]
        loss_fn = self.loss_fn

        def loss_of(out):
            return loss_fn(out, *holder[0])

        try:      # the inputs after the first are read inside the stages (models.graph.ContextInputs)
            lm = linearize_model(self.model, x, loss_of, context=self.inputs[1:self.n_inputs])
        except Exception as e:      # noqa: BLE001 - any tracing failure: no chain plans, the reason reported
            self.chain_note = f"the model could not be traced and cut into a chain ({_error_line(e)})"
            return
        # frozen first layers (fine-tuning a head): folded into the first trained stage, run without a
        # graph as autograd runs them (the step asks no gradient of the input)
        folded = lm.L
        lm = lm.fold_frozen_prefix()
        folded -= lm.L
        loss_stage = lm.loss_stage(loss_of)
        clock = self._clock_name()
        t1 = time.perf_counter()
        try:
            chain = profile_chain(lm.stages, x, loss_stage, repeats=3, device=self.device, names=lm.names,
                                  name="compile_under_budget", loss_name=lm.loss_name, input_grad=False, clock=clock,
                                  memory=_CHAIN_MEMORY, deadline=self._build_deadline,
                                  provenance={"frozen_stages_folded": folded} if folded else None)
        except TimeoutError:
            self.chain_note = f"not finished within time_limit={self.time_limit:g} s (profiling the chain)"
            self.profile_time = time.perf_counter() - t0
            return
        self._chain = (lm.stages, loss_stage, holder, chain, float(min_memory(chain)))
        self._context = lm.captured.context
        self.chain_note = ""
        self._build_chunked(lm, x, holder, clock, time.perf_counter() - t1)
        unsupported = ("" if not (folded or self._context is not None or lm.captured.output is not None) else
                       "not tried with " + ("frozen first layers" if folded else "inputs after the first"
                                            if self._context is not None else "an output structure"))
        self._multi_pending = (x, loss_of, clock, time.perf_counter() - t1, unsupported)
        self.profile_time = time.perf_counter() - t0

    def _build_chunked(self, lm, x, holder, clock: str, profile_seconds: float) -> None:
        """The chain with its loss stage over chunks of tokens (:class:`memplan.models.chunked_loss.
        ChunkedHeadLoss`), where it lowers the chain's least memory: a head folded into the loss, a
        loss that splits over tokens (:class:`~memplan.models.chunked_loss.TokenLoss`), the chunked
        stage's loss and input gradient equal to the whole stage's on a sample. The loss stage's sizes
        are measured at 2, 4, 8, ... chunks (the other stages' rows are the profiled chain's) until the
        least memory stops falling by 1%; the fewest chunks within 1% of the lowest found (``loss_chunks``)
        and each fewer count on the way down that lowered it by 1% or more are kept (more chunks cost
        time: each adds a transient gradient of the head's weight, so a budget between two counts' least
        memories is best served by the fewer), each chain profiled again with its count (times in
        context): the least-memory count here, the fewer ones after the compiled chains
        (:meth:`_build_fewer_chunks`). ``loss_chunk_minima`` records the least memory at each
        count tried; ``loss_chunks_note`` why no chunked chain was kept, or which counts time left out.
        ``profile_seconds``: how long the chain's profile took: a chunked chain is profiled only where as
        long again still ends before the search's part of ``time_limit`` (:attr:`_build_deadline`)."""
        import torch

        from memplan.baselines.remat_min_memory import min_memory
        from memplan.models.chunked_loss import chunked_loss_check, token_loss
        from memplan.models.profiler import profile_chain, profile_stage

        stages, base, base_min = lm.stages, self._chain[3], self._chain[4]
        self.loss_chunk_minima = {1: base_min}
        loss = token_loss(self.loss_fn)
        if lm.captured.output is not None:
            self.loss_chunks_note = (f"the model returns its output in a {lm.captured.output.kind}: a loss over "
                                     "chunks of tokens takes the logits tensor itself")
            return
        if lm.head is None:
            self.loss_chunks_note = "no head is folded into the loss stage"
            return
        if loss is None:
            self.loss_chunks_note = ("the loss does not say how it splits over tokens (a TokenLoss, e.g. "
                                     "memplan.TokenCrossEntropy)")
            return
        a = self._head_input()
        if a.dim() < 3 or a.shape[1] < 2:
            self.loss_chunks_note = f"the head's input {tuple(a.shape)} has no token dimension (batch x tokens x ...)"
            return

        def targets():
            return tuple(holder[0])

        why = chunked_loss_check(self._chain[1], lm.loss_stage(loss, 2, targets), a)
        if why:
            self.loss_chunks_note = why
            return
        L, prev = base.L, base_min
        k = 2
        while k <= a.shape[1]:
            if self._past(self._build_deadline):
                self.loss_chunks_note = f"not tried within time_limit={self.time_limit:g} s"
                return
            vals, _ = profile_stage(lm.loss_stage(loss, k, targets), a, repeats=0, device=self.device,
                                    input_grad=True, delta=torch.ones((), device=self.device))
            c = base.without_resident()
            c.resident = base.resident
            c.wa[L + 1], c.wabar[L + 1], c.of[L + 1], c.ob[L + 1] = vals["wa"], vals["wabar"], vals["of"], vals["ob"]
            c.of_all[L + 1], c.of_ng[L + 1] = vals["of_all"], vals["of_ng"]     # each forward's own
            m = float(min_memory(c))
            self.loss_chunk_minima[k] = m
            if m > prev * (1 - 0.01):
                break
            prev = m
            k *= 2
        low = min(self.loss_chunk_minima.values())
        best_k = min(k for k, m in self.loss_chunk_minima.items() if m <= low * 1.01)
        if best_k == 1:
            self.loss_chunks_note = "chunking the loss stage does not lower the chain's least memory by 1%"
            return
        # the counts on the way down to best_k, each lowering the least memory by 1% or more: fewer chunks
        # run faster (each chunk adds a transient gradient of the head's weight), so a budget between the
        # whole loss stage's least memory and best_k's gets the fewest chunks that reach it (one count per
        # chain had given the fine-tuned GPT-2 its 64-chunk plan, 2.5x slower, at every such budget)
        path, prev = [], base_min
        for k in sorted(c for c in self.loss_chunk_minima if 1 < c < best_k):
            if self.loss_chunk_minima[k] <= prev * (1 - 0.01):
                path.append(k)
                prev = self.loss_chunk_minima[k]
        self._pending_chunks = path

        def profile(k: int):
            stage = lm.loss_stage(loss, k, targets)
            chain = profile_chain(stages, x, stage, repeats=3, device=self.device, names=lm.names,
                                  name=f"compile_under_budget, loss in {k} chunks",
                                  loss_name=f"{lm.loss_name} in {k} chunks", input_grad=False, clock=clock,
                                  memory=_CHAIN_MEMORY, provenance={"loss_chunks": k,
                                              "loss_chunking": "models.chunked_loss.ChunkedHeadLoss: the folded head "
                                              "and the loss over this many slices of the tokens, the logits recomputed "
                                              "chunk by chunk in the backward"},
                                  deadline=self._build_deadline)
            return (k, stage, chain, float(min_memory(chain)))

        self._profile_chunks = profile
        if self._past(self._build_deadline, profile_seconds):     # as long as the chain's profile took
            self.loss_chunks_note = f"not tried within time_limit={self.time_limit:g} s"
            return
        t0 = time.perf_counter()
        try:
            self._chunked = profile(best_k)
            self._chunk_seconds = time.perf_counter() - t0
        except TimeoutError:
            self.loss_chunks_note = f"not finished within time_limit={self.time_limit:g} s (profiling the chunked chain)"
            return
        self.loss_chunks_note = ""

    def _build_fewer_chunks(self) -> None:
        """The chunked loss stage's chains at the fewer counts :meth:`_build_chunked` found on the way
        down (faster, more memory than its least-memory count), each while as long as the chain's profile
        took still ends before the search's part of ``time_limit``; after the compiled chains (the
        fastest plans on a GPU), which they would otherwise leave without time. ``loss_chunks_note``
        names the counts time left out."""
        path, self._pending_chunks = self._pending_chunks, []
        if self._chunked is None or not path:
            return
        need = self._chunk_seconds
        for i, k in enumerate(path):
            if self._past(self._build_deadline, need):
                self.loss_chunks_note = (f"{', '.join(map(str, path[i:]))} chunks not tried within "
                                         f"time_limit={self.time_limit:g} s")
                break
            t0 = time.perf_counter()
            try:
                self._chunked_fewer.append(self._profile_chunks(k))
            except TimeoutError:
                self.loss_chunks_note = (f"{', '.join(map(str, path[i:]))} chunks not finished within "
                                         f"time_limit={self.time_limit:g} s")
                break
            need = time.perf_counter() - t0
        self._progress(f"chain: the loss in {self.loss_chunk_counts} chunks profiled")

    def _build_multi(self) -> None:
        """The chain cut where several tensors cross (``linearize_model(..., cuts="auto")``), where the
        single-tensor stages are too coarse for it to take the single-tensor cuts (a U-Net's skips leave
        few), profiled as the eager chain is (c10's allocator events, times in context) and kept where
        its least memory known to fit (:func:`_multi_least`: the resident tensors charged only while
        they exist) is 1% or more below the eager chains'. Not tried with frozen first layers,
        inputs after the first or an output structure (the eager chain's own handling of them);
        ``multi_note`` says why there is none."""
        from memplan.models.graph import linearize_model
        from memplan.models.profiler import profile_chain
        pend, self._multi_pending = self._multi_pending, None
        if pend is None or self._chain is None:
            return
        x, loss_of, clock, seconds, unsupported = pend
        if self._past(self._build_deadline, seconds):       # as long as the eager chain's profile took
            self.multi_note = f"not tried within time_limit={self.time_limit:g} s"
            self._progress(f"chain: multi-tensor cuts {self.multi_note}")
            return
        try:
            lm = linearize_model(self.model, x, loss_of, cuts="auto", context=self.inputs[1:self.n_inputs])
        except Exception as e:      # noqa: BLE001 - any failure of the multi-tensor cut: none, the reason kept
            self.multi_note = f"the model could not be cut where several tensors cross ({_error_line(e)})"
            return
        if lm.residency is None:
            self.multi_note = "the single-tensor cuts are fine enough (cuts='auto' takes them)"
            return
        if unsupported:         # the eager chain's handling of these, not the multi-tensor path's (yet)
            self.multi_note = unsupported
            return
        loss_stage = lm.loss_stage(loss_of)
        try:
            chain = profile_chain(lm.stages, x, loss_stage, repeats=3, device=self.device, names=lm.names,
                                  name="compile_under_budget, multi-tensor cuts", loss_name=lm.loss_name,
                                  input_grad=False, clock=clock, memory=_CHAIN_MEMORY, deadline=self._build_deadline)
        except TimeoutError:
            self.multi_note = f"not finished within time_limit={self.time_limit:g} s (profiling the chain)"
            self._progress(f"chain: multi-tensor cuts {self.multi_note}")
            return
        except Exception as e:      # noqa: BLE001 - a profile the multi-tensor path cannot make: none, the reason
            self.multi_note = f"the multi-tensor chain could not be profiled ({_error_line(e)})"
            return
        least = _multi_least(chain, self._solver_seconds())
        if not least < 0.99 * self.chain_minimum:
            self.multi_note = "multi-tensor cuts do not lower the chain's least memory by 1%"
            return
        self._multi = (lm.stages, loss_stage, chain, float(least))
        self._progress(f"chain: multi-tensor cuts, L = {chain.L} stages profiled, least memory "
                       f"{fmt_memory(least)} (the single-tensor chain's {fmt_memory(self.chain_minimum)})")

    def multi_plan(self, limit: float) -> Candidate | None:
        """Rotor's plan at ``limit`` bytes on the chain of multi-tensor cuts (:meth:`_build_multi`;
        :func:`_multi_solve`: the faster of rotor's plan and the baselines replayed with the resident
        tensors charged only while they exist), measured (kind ``"chain-multi"``); None without that
        chain or a plan."""
        if self._multi is None or not limit > 0:
            return None
        stages, loss_stage, chain, _ = self._multi
        key = float(limit)
        t0 = time.perf_counter()
        if key not in self._xsolved:
            if self._no_time_for("chain plans on multi-tensor cuts"):
                return None
            self._xsolved[key] = _multi_solve(chain, key, self._solver_seconds())
        sol = self._xsolved[key]
        if sol is None:
            return None
        ops = tuple(tuple(o) for o in sol[0].ops)
        if ops in self.multi_plans:
            return self.multi_plans[ops][0]
        if self._no_time_for("chain plans on multi-tensor cuts"):
            return None
        step = self._stages_step(ops, stages, loss_stage, chain)
        sched, rep, name = sol
        peak, ts = self._measure_plan(step, rep.peak_memory)
        cand = Candidate(name, math.nan, peak, statistics.median(ts), ts, time.perf_counter() - t0,
                         kind="chain-multi", memory_limit=key, predicted_peak=float(rep.peak_memory), ops=ops)
        self._xoffset = max(self._xoffset, peak - float(rep.peak_memory))
        self.multi_plans[ops] = (cand, step)
        return cand

    def multi_fit(self, budget: float, tries: int = 4) -> Candidate | None:
        """:meth:`chain_fit` on the chain of multi-tensor cuts: solved at ``budget`` less the largest
        excess of a measured over a simulated peak there, lowered by the excess while over."""
        if self._multi is None:
            return None
        lo = self._multi[3]
        limit = budget - max(0.0, self._xoffset)
        for _ in range(tries):
            limit = max(limit, lo)
            cand = self.multi_plan(limit)
            if cand is None:
                return None
            if cand.peak <= budget:
                return cand
            if limit <= lo:
                return None
            limit -= cand.peak - budget
        return None

    def _head_input(self):
        """The loss stage's input on the example: the chain's (eager) stages run without autograd."""
        import torch

        with torch.no_grad():
            a = self.inputs[0]
            for s in self._chain[0]:
                a = s(a)
        return a

    def _build_compiled_chains(self) -> None:
        """One compiled chain per stage fraction (:meth:`_build_compiled_chain`), in the order given;
        one that would overrun ``time_limit`` (elapsed plus the previous chain's build time; the first
        one: the eager chain's profile plus the first fraction's compile, as the stages compile as much
        code) is not built. ``compiled_chain_note`` sums up ``compiled_chain_notes``."""
        last = self.profile_time + max((c.compile_time for c, _, _ in self.compiled), default=self.profile_time)
        for sf in self.stage_fractions:
            if self._past(self._build_deadline, last):
                self.compiled_chain_notes[sf] = f"not tried within time_limit={self.time_limit:g} s"
                if sf == self.stage_fractions[0]:
                    self.compiled_loss_chunks_note = self.compiled_chain_notes[sf]
                continue
            t0 = time.perf_counter()
            self._build_compiled_chain(sf)
            last = time.perf_counter() - t0
        if len(self.stage_fractions) == 1:
            self.compiled_chain_note = self.compiled_chain_notes.get(self.stage_fractions[0], "")
        else:
            self.compiled_chain_note = "; ".join(f"stage fraction {sf:g}: {n}"
                                                 for sf, n in self.compiled_chain_notes.items() if n)

    def _stage_config(self, sf: float) -> dict | None:
        """The ``torch._functorch.config`` setting stages compile under at stage fraction ``sf`` (None
        at 1: the partitioner's default, no solver asked)."""
        if sf >= 1:
            return None
        cfg = self._config_for(sf, self.stage_solver)
        cfg.setdefault("activation_memory_budget_solver", "dp")      # PyTorch's dp_knapsack, said explicitly
        return cfg

    def _build_compiled_chain(self, sf: float = 1.0) -> None:
        """The hierarchy: the chain's stages and its loss stage (whatever module it is) compiled by
        ``torch.compile`` with the search's backend (:func:`memplan.models.compiled.compile_stages`:
        the compiler's partitioner and fusion inside a stage; at stage fraction ``sf`` < 1 with
        ``activation_memory_budget=sf`` and ``stage_solver``, :meth:`_stage_config`), profiled with the
        allocator-event method that sees compiled code (``profile_chain(memory="profiler")``), for rotor
        across the stages. A loss stage Dynamo cannot capture in one graph stays eager
        (``compiled_chain_notes[sf]`` says so); any other failure leaves no compiled chain at ``sf``
        (the note says why)."""
        from memplan.baselines.remat_min_memory import min_memory
        from memplan.models.compiled import compile_stages
        from memplan.models.profiler import profile_chain

        stages, loss_stage, holder, chain, _ = self._chain
        names = list(chain.stage_names)
        clock = self._clock_name()
        t0 = time.perf_counter()
        note = ""
        cfg = self._stage_config(sf)
        if cfg is not None and hasattr(cfg["activation_memory_budget_solver"], "calls"):
            self.stage_solver_calls[sf] = cfg["activation_memory_budget_solver"].calls
        k = self.stage_fractions.index(sf) if sf in self.stage_fractions else len(self.stage_fractions)
        tag = f"{id(self):x}" if k == 0 else f"{id(self):x}_sf{k}"
        cst, compiled_loss = compile_stages(stages, loss_stage, self.backend, tag=tag, config=cfg)
        within = ("" if cfg is None else
                  f", activation_memory_budget={sf:g} with the {self.stage_solver} keep-or-recompute solver")
        for compile_loss in (True, False):        # the stages' compiled graphs are kept for the second try
            cls = compiled_loss if compile_loss else loss_stage
            try:
                with _Preserved(self.model, self.params):
                    cchain = profile_chain(
                        cst, self.inputs[0], cls, repeats=3, device=self.device, names=names[1:-1],
                        name="compile_under_budget-compiled", loss_name=names[-1], input_grad=False, clock=clock,
                        memory="profiler",
                        deadline=self._build_deadline,
                        provenance={"stages": f"torch.compile(backend={self.backend!r}, fullgraph=True, "
                                              f"dynamic=False, options={cst[0].options if cst else None}) per stage "
                                              f"(memplan.models.compiled){within}, loss stage "
                                              f"{'compiled' if compile_loss else 'eager'}"})
            except TimeoutError:
                self.compiled_chain_notes[sf] = (f"not finished within time_limit={self.time_limit:g} s "
                                                 f"(profiling the compiled stages)")
                break
            except Exception as e:  # noqa: BLE001 - any compile or profiling failure: reported, no such plans
                note = f"compiled stages failed ({_error_line(e)})"
                continue
            self._cchains[sf] = (cst, cls, holder, cchain, float(min_memory(cchain)))
            self.compiled_chain_notes[sf] = "" if compile_loss else f"loss stage eager: {note}"
            break
        else:
            self.compiled_chain_notes[sf] = note
        if sf == self.stage_fractions[0]:
            if sf in self._cchains:
                self._build_compiled_chunked(names, clock, t0)
            else:
                self.compiled_loss_chunks_note = "no compiled chain (see compiled_chain_note)"
        self.compiled_profile_times[sf] = time.perf_counter() - t0

    def _build_compiled_chunked(self, names: list, clock: str, t0: float) -> None:
        """The compiled chain with its loss stage over chunks of tokens, each chunk compiled
        (:class:`memplan.models.chunked_loss.ChunkedHeadLoss` with the search's backend: one graph per
        chunk size; a linear head's logits one matmul and the loss compiled on them, any other head
        compiled with the loss), at the eager chunked chain's chunk count (:meth:`_build_chunked`).
        Two variants for a linear head: the logits recomputed chunk by chunk in the backward, and the
        gradients taken in the forward (``grad_in_forward``: no recomputation, the head's gradient
        buffers held to the backward); rotor is solved on each and the plan with the smaller predicted
        makespan measured, as for the eager variants. Each stage's loss and input gradient must equal
        the whole loss stage's on a sample (:func:`~memplan.models.chunked_loss.chunked_loss_check`,
        which also compiles it); each chain is profiled with c10's allocator events
        (``memory="profiler"``), the compiled stages' graphs reused. ``compiled_loss_chunks_note``
        says why a variant is missing. ``t0``: when the compiled chain's build began: the variants are
        not started where as long again would pass the search's part of ``time_limit``."""
        from memplan.baselines.remat_min_memory import min_memory
        from memplan.models.chunked_loss import ChunkedHeadLoss, chunked_loss_check
        from memplan.models.profiler import profile_chain

        if self._chunked is None:
            self.compiled_loss_chunks_note = f"no chunked loss stage ({self.loss_chunks_note})"
            return
        if self._past(self._build_deadline, time.perf_counter() - t0):    # as long as the compiled chain took
            self.compiled_loss_chunks_note = f"not tried within time_limit={self.time_limit:g} s"
            return
        k, eager = self._chunked[0], self._chunked[1]
        if not eager.loss.compilable:
            self.compiled_loss_chunks_note = (f"the loss ({type(eager.loss).__name__}) does not give its chunks' "
                                              f"targets (TokenLoss.chunk_targets, chunk_sum)")
            return
        cst, x = self._cchain[0], self.inputs[0]
        stage = ChunkedHeadLoss(eager.head, eager.loss, k, eager.targets, backend=self.backend,
                                tag=f"{id(self):x}_{k}")
        stages = [stage]
        if stage.compiled_linear is not None:      # the same compiled loss, its gradients taken in the forward
            fused = ChunkedHeadLoss(eager.head, eager.loss, k, eager.targets, backend=self.backend,
                                    tag=f"{id(self):x}_{k}_fwd", grad_in_forward=True)
            fused.compiled_chunk = stage.compiled_chunk
            stages.append(fused)
        found, notes = [], []
        with _Preserved(self.model, self.params):
            a = self._head_input()
            for st in stages:
                how = ("gradients in the forward, scaled in the backward" if st.grad_in_forward else
                       "the logits recomputed chunk by chunk in the backward")
                why = chunked_loss_check(self._chain[1], st, a)
                if why:
                    notes.append(f"compiled chunks ({how}): {why}")
                    continue
                try:
                    cchain = profile_chain(
                        cst, x, st, repeats=3, device=self.device, names=names[1:-1],
                        name=f"compile_under_budget-compiled, loss in {k} chunks",
                        loss_name=f"{names[-1]} in {k} chunks", input_grad=False, clock=clock, memory="profiler",
                        deadline=self._build_deadline,
                        provenance={"stages": f"torch.compile(backend={self.backend!r}) per stage "
                                              f"(memplan.models.compiled)",
                                    "loss_chunks": k, "loss_grad_in_forward": st.grad_in_forward,
                                    "loss_chunking": "models.chunked_loss.ChunkedHeadLoss with each chunk's loss "
                                                     "(and head, unless linear) compiled (backend "
                                                     f"{self.backend!r}), {how}"})
                except TimeoutError:
                    notes.append(f"compiled chunks ({how}): not finished within time_limit={self.time_limit:g} s")
                    break
                except Exception as e:  # noqa: BLE001 - any compile or profiling failure: reported, no such plans
                    notes.append(f"compiled chunks ({how}) failed ({_error_line(e)})")
                    continue
                found.append((k, st, cchain, float(min_memory(cchain))))
        self._cchunked = found
        self.compiled_loss_chunks_note = "; ".join(notes)

    # -- chain plans -------------------------------------------------------------------------------
    @property
    def chain(self):
        """The profiled chain (:class:`memplan.models.chain.Chain`), or None."""
        return self._chain[3] if self._chain else None

    @property
    def chain_minimum(self) -> float | None:
        """The least memory of any re-materialization sequence on the chain's model (bytes), or None;
        the chunked loss stage's chain included."""
        return min(v[3] for v in self._variants()) if self._chain else None

    @property
    def _cchain(self):
        """The compiled chain at the first stage fraction (``(stages, loss stage, targets holder, chain,
        least memory)``), or None."""
        return self._cchains.get(self.stage_fractions[0])

    @property
    def compiled_chain(self):
        """The chain profiled with compiled stages (:meth:`_build_compiled_chain`) at the first stage
        fraction, or None."""
        return self._cchain[3] if self._cchain else None

    @property
    def compiled_chains(self) -> dict:
        """Stage fraction -> the chain profiled with stages compiled at it (those built)."""
        return {sf: c[3] for sf, c in self._cchains.items()}

    @property
    def compiled_profile_time(self) -> float:
        """Seconds spent compiling and profiling the compiled chains, all stage fractions."""
        return float(sum(self.compiled_profile_times.values()))

    def _stage_key(self, compiled) -> float | None:
        """``compiled`` of :meth:`chain_plan` / :meth:`chain_fit` as a stage fraction: False -> None (the
        eager chain), True -> the first stage fraction, a number -> that fraction."""
        if compiled is False or compiled is None:
            return None
        if compiled is True:
            return self.stage_fractions[0]
        return float(compiled)

    def compiled_chain_minimum_at(self, sf: float) -> float | None:
        """The least memory of the compiled-stage chains at stage fraction ``sf`` (the compiled chunked
        loss stage's chain included at the first one), or None."""
        v = self._cvariants(sf)
        return min(x[3] for x in v) if v else None

    @property
    def compiled_chain_minimum(self) -> float | None:
        """The least memory of the compiled-stage chains' model at the first stage fraction (bytes; the
        compiled chunked loss stage's chain included), or None."""
        return self.compiled_chain_minimum_at(self.stage_fractions[0])

    @property
    def compiled_loss_chunks(self) -> int:
        """The chunk count of the compiled chunked loss stage's chain (1: none, ``compiled_loss_chunks_note``
        says why)."""
        return self._cchunked[0][0] if self._cchunked else 1

    @property
    def loss_chunks(self) -> int:
        """The chunk count of the chunked loss stage's least-memory chain (1: none, ``loss_chunks_note``
        says why; :attr:`loss_chunk_counts`: every count profiled)."""
        return self._chunked[0] if self._chunked else 1

    @property
    def loss_chunk_counts(self) -> str:
        """The chunk counts of the chunked loss stage's chains profiled, e.g. ``"2, 4, 8"`` ("" for none)."""
        return ", ".join(str(v[0]) for v in self._variants()[1:])

    def _variants(self) -> list[tuple]:
        """The chains plans are solved on: ``(loss chunks, loss stage, chain, least memory)``, the
        whole loss stage first."""
        if self._chain is None:
            return []
        return ([(1, self._chain[1], self._chain[3], self._chain[4])] + list(self._chunked_fewer)
                + ([self._chunked] if self._chunked else []))

    def _cvariants(self, sf: float | None = None) -> list[tuple]:
        """The same for the compiled-stage chain at stage fraction ``sf`` (None: the first): the whole
        compiled loss stage, then (at the first stage fraction) the compiled chunked ones."""
        sf = self.stage_fractions[0] if sf is None else sf
        c = self._cchains.get(sf)
        if c is None:
            return []
        return [(1, c[1], c[3], c[4])] + (list(self._cchunked) if sf == self.stage_fractions[0] else [])

    def _chain_step(self, ops: tuple, loss_stage: Callable | None, compiled, chain) -> Callable:
        sf = self._stage_key(compiled)
        stages, own_loss, _, _, _ = self._chain if sf is None else self._cchains[sf]
        return self._stages_step(ops, stages, own_loss if loss_stage is None else loss_stage, chain)

    def _stages_step(self, ops: tuple, stages, loss_stage, chain) -> Callable:
        """A training step running ``ops`` on ``stages`` and ``loss_stage``. On the ``chain`` the plan
        was solved on, the executor holds a fused group's a^j and delta^j only for the B's
        within 1% of the replay's peak (:func:`models.runtime.holds_at_peak`): the step's peak is the
        fully held step's wherever the replay's largest B is the run's (else at most that), with the
        host time of a run without holds (two hooks per held B instead of one per junction)."""
        from memplan.models.remat import simulate_remat
        from memplan.models.runtime import execute, holds_at_replay_peak

        seq = list(ops)
        hold = holds_at_replay_peak(seq, simulate_remat(chain, seq).memory_during, device=self.device)
        return self._executor_step(lambda x: execute(stages, loss_stage, x, seq, device=self.device,
                                                     input_grad=False, sync=False, hold=hold))

    def _executor_step(self, run: Callable) -> Callable:
        """A training step ``step(*inputs, *targets)`` of an executor call ``run(x)`` (made with
        ``sync=False``: no synchronize per step, as the compiled steps it is timed against): the
        targets go to the holder the chains' loss stages share, the loss comes back as a tensor."""
        import torch

        holder = self._chain[2]
        n = self.n_inputs
        context = self._context

        def step(*args):
            holder[0] = tuple(args[n:])
            if context is not None:
                try:
                    context.set(args[1:n])
                except ValueError as e:
                    raise InputError(f"compile_under_budget's step: {e}") from None
            res = run(args[0])
            return res.loss_tensor if res.loss_tensor is not None else torch.tensor(res.loss)

        return step

    def chain_plan(self, limit: float, compiled=False) -> Candidate | None:
        """Rotor's plan at ``limit`` bytes of the chain's model, measured (cached by its loss chunks and
        sequence); None when rotor has no plan there (below the chain's minimum). With a chunked loss
        stage's chain (:meth:`_build_chunked`) rotor is solved on every chain and the plan with the
        smaller predicted makespan is kept. ``compiled``: on the chains of compiled stages (kind
        ``"chain-compiled"``; the whole loss stage and, where :meth:`_build_compiled_chunked` made one,
        the compiled chunked one, chosen the same way): True, the first stage fraction's; a number,
        that stage fraction's."""
        from memplan.baselines.remat_rotor import persistent

        sf = self._stage_key(compiled)
        c, solved, plans = ((self._chain, self._solved, self.chain_plans) if sf is None else
                            (self._cchains.get(sf), self._csolved, self.compiled_chain_plans))
        pre = () if sf is None else (sf,)
        if c is None:
            return None
        what = "chain plans" if sf is None else "chain plans with compiled stages"
        t0 = time.perf_counter()
        variants = self._variants() if sf is None else self._cvariants(sf)
        best = None
        for k, loss_stage, chain, lo in variants:
            if limit < lo:
                continue
            key = pre + (k, _in_forward(loss_stage), float(limit))
            if key not in solved:                  # the least-memory limit is asked for more than once
                if self._no_time_for(what):
                    return None
                solved[key] = persistent(chain, float(limit), time_limit=self._solver_seconds())
            sol = solved[key]
            if sol.success and (best is None or sol.objective < best[2].objective):
                best = (k, loss_stage, sol, chain)
        solve_time = time.perf_counter() - t0
        if best is None:
            return None
        k, loss_stage, sol, chain = best
        ops = tuple(tuple(o) for o in sol.schedule.ops)
        pkey = pre + (k, _in_forward(loss_stage), ops)
        if pkey in plans:
            return plans[pkey][0]
        if self._no_time_for(what):
            return None
        step = self._chain_step(ops, loss_stage, sf if sf is not None else False, chain)
        peak, ts = self._measure_plan(step, sol.peak_memory)
        cand = Candidate("rotor", math.nan, peak, statistics.median(ts), ts, solve_time,
                         kind="chain" if sf is None else "chain-compiled",
                         memory_limit=float(limit), predicted_peak=float(sol.peak_memory), ops=ops, loss_chunks=k,
                         stage_fraction=1.0 if sf is None else sf,
                         stage_solver=self.stage_solver if sf is not None and sf < 1 else "",
                         loss_grad_in_forward=_in_forward(loss_stage))
        if sf is None:
            self._offset = max(self._offset, peak - float(sol.peak_memory))
        else:
            self._coffsets[sf] = max(self._coffsets.get(sf, 0.0), peak - float(sol.peak_memory))
        plans[pkey] = (cand, step)
        return cand

    def chain_fit(self, budget: float, tries: int = 4, compiled=False) -> Candidate | None:
        """The rotor plan for ``budget`` whose measured peak fits it: rotor solved at ``budget`` minus
        the largest excess of measured over simulated peak seen so far, lowered by the excess and
        solved again while the measurement is over (``tries`` solves at most); None if none fits.
        ``compiled``: on the chain of compiled stages. Their model can over-estimate a peak (each
        forward's own overhead is profiled, but a stage's overheads are measured alone, not in the
        sequence), so where the measured peak leaves more than 1% of the budget, rotor
        is solved once more with that slack added (measured as a candidate; the faster fitting one is
        returned). ``compiled`` as in :meth:`chain_plan`."""
        sf = self._stage_key(compiled)
        c = self._chain if sf is None else self._cchains.get(sf)
        if c is None:
            return None
        compiled = False if sf is None else sf
        lo = self.chain_minimum if sf is None else self.compiled_chain_minimum_at(sf)
        limit = budget - max(0.0, self._offset if sf is None else self._coffsets.get(sf, 0.0))
        for _ in range(tries):
            limit = max(limit, lo)
            cand = self.chain_plan(limit, compiled)
            if cand is None:
                return None
            if cand.peak <= budget:
                if sf is not None and budget - cand.peak > 0.01 * budget:
                    up = self.chain_plan(limit + budget - cand.peak, compiled)
                    if up is not None and up.peak <= budget and up.step_time < cand.step_time:
                        return up
                return cand
            if limit <= lo:
                return None
            limit -= cand.peak - budget
        return None

    # -- a partitioner budget per stage ---------------------------------------------------------------
    def _mixed_sources(self) -> list[tuple]:
        """What a per-stage choice draws from: ``(stage fraction, stages, loss stage, chain, loss chunks,
        gradients in the forward)`` for each compiled chain with its whole loss stage, then the compiled
        chunked loss stages (at the first stage fraction, whose stages they run with). Empty below two
        stage fractions."""
        sfs = [sf for sf in self.stage_fractions if sf in self._cchains]
        if len(sfs) < 2:
            return []
        out = [(sf, self._cchains[sf][0], self._cchains[sf][1], self._cchains[sf][3], 1, False) for sf in sfs]
        if sfs[0] == self.stage_fractions[0]:
            out += [(sfs[0], self._cchains[sfs[0]][0], st, ch, k, _in_forward(st)) for k, st, ch, _ in self._cchunked]
        return out

    def mixed_plan(self, limit: float) -> Candidate | None:
        """Rotor's plan at ``limit`` bytes with a partitioner budget chosen per stage among the compiled
        chains, and the loss stage among their whole and chunked loss stages
        (:func:`memplan.baselines.remat_variants.persistent_variants`: exact over every assignment, never
        slower in the model than any one chain's plan), measured (kind ``"chain-mixed"``). None with
        fewer than two compiled chains, when nothing fits, or when the best assignment gives every stage
        the same budget (one chain's own plan: :meth:`chain_plan`)."""
        from memplan.baselines.remat_variants import persistent_variants

        src = self._mixed_sources()
        if not src or not limit > 0:
            return None
        t0 = time.perf_counter()
        key = float(limit)
        if key not in self._msolved:
            if self._no_time_for("chain plans with a partitioner budget per stage"):
                return None
            self._msolved[key] = persistent_variants([v[3] for v in src], key)
        plan = self._msolved[key]
        if plan is None:
            return None
        chosen = [src[v] for v in plan.assign[1:]]
        per_stage = tuple(v[0] for v in chosen)
        if len(set(per_stage)) == 1:
            return None
        stages = [v[1][l] for l, v in enumerate(chosen[:-1])]
        return self._mixed_candidate(tuple(tuple(o) for o in plan.schedule.ops), per_stage, stages, chosen[-1],
                                     key, float(plan.peak_memory), time.perf_counter() - t0, plan.chain)

    def _mixed_candidate(self, ops: tuple, per_stage: tuple, stages: list, loss_source: tuple, limit: float,
                         predicted: float, solve_time: float, chain) -> Candidate | None:
        """``ops`` run on ``stages`` (stage ``l`` compiled at ``per_stage[l - 1]``) and the loss stage of
        ``loss_source`` (an entry of :meth:`_mixed_sources`), measured as the other chain plans are."""
        _, _, loss_stage, _, k, in_fwd = loss_source
        pkey = (per_stage, k, in_fwd, ops)
        if pkey in self.mixed_plans:
            return self.mixed_plans[pkey][0]
        if self._no_time_for("chain plans with a partitioner budget per stage"):
            return None
        step = self._stages_step(ops, stages, loss_stage, chain)
        peak, ts = self._measure_plan(step, predicted)
        cand = Candidate("rotor", math.nan, peak, statistics.median(ts), ts, solve_time, kind="chain-mixed",
                         memory_limit=limit, predicted_peak=predicted, ops=ops, stage_fraction=math.nan,
                         stage_solver=self.stage_solver, per_stage=per_stage, loss_chunks=k,
                         loss_grad_in_forward=in_fwd)
        self._moffset = max(self._moffset, peak - predicted)
        self.mixed_plans[pkey] = (cand, step)
        return cand

    def mixed_minimum(self) -> float | None:
        """The least memory (bytes, within 0.1%) at which the per-stage DP has a plan: bisection from
        half the least of the sources' minima up to where it first has one (the DP runs in
        milliseconds); None without sources."""
        from memplan.baselines.remat_min_memory import min_memory
        from memplan.baselines.remat_variants import persistent_variants

        src = self._mixed_sources()
        if not src:
            return None
        if self._mmin is None:
            chains = [v[3] for v in src]
            lo = min(float(min_memory(c)) for c in chains) / 2
            hi = 2 * lo
            for _ in range(200):                 # sizes rounded up to slots need a little more
                if persistent_variants(chains, hi) is not None:
                    break
                hi *= 1.01
            else:
                return None
            if persistent_variants(chains, lo) is not None:
                hi = lo
            while hi - lo > 1e-3 * hi:
                mid = (lo + hi) / 2
                if persistent_variants(chains, mid) is None:
                    lo = mid
                else:
                    hi = mid
            self._mmin = hi
        return self._mmin

    def mixed_fit(self, budget: float, tries: int = 4) -> Candidate | None:
        """The per-stage plan for ``budget`` whose measured peak fits it, as :meth:`chain_fit` does for
        the compiled chains: the limit lowered by the largest excess seen, then by each new excess; where
        the measured peak leaves more than 1% of the budget (the model takes each stage's largest forward
        transient over the variants), solved once more with that slack added and the faster fitting
        plan returned."""
        if not self._mixed_sources():
            return None
        limit = budget - max(0.0, self._moffset)
        for _ in range(tries):
            cand = self.mixed_plan(limit)
            if cand is None:
                return None
            if cand.peak <= budget:
                if budget - cand.peak > 0.01 * budget:
                    up = self.mixed_plan(limit + budget - cand.peak)
                    if up is not None and up.peak <= budget and up.step_time < cand.step_time:
                        return up
                return cand
            limit -= cand.peak - budget
        return None

    # -- answers -----------------------------------------------------------------------------------
    def measured(self) -> list[Candidate]:
        """Every candidate measured so far: the compiled grid, then the chain plans."""
        return ([c for c, _, _ in self.compiled] + [c for c, _ in self.chain_plans.values()]
                + [c for c, _ in self.compiled_chain_plans.values()] + [c for c, _ in self.mixed_plans.values()]
                + [c for c, _ in self.offload_plans.values()] + [c for c, _ in self.multi_plans.values()])

    # -- offloading (paper 001) ----------------------------------------------------------------------
    def _setup_offload(self) -> None:
        """The chain the offloading plans run on (the first stage fraction's compiled chain, else the
        eager one: its whole loss stage, store-all order), the stages whose output is a view of their
        input (their values cannot be moved apart: :mod:`memplan.models.runtime_offload`), and the
        link: ``bandwidth``, else measured on CUDA (the slower direction), else (emulated) all of the
        chain's abar in one store-all step."""
        base = self._cchain or self._chain
        if base is None:
            self.offload_note = "no chain (see chain_note)"
            return
        from memplan.models.runtime_offload import merge_view_stages, view_stages

        stages, loss_stage, holder, chain, _ = base
        with _Preserved(self.model, self.params):
            # a stage whose output is a view of its input (a flatten, a dropout of rate 0) runs with the
            # stage before it: one storage, one value to move; one left at the front cannot be moved
            found = view_stages(stages, self.inputs[0])
            if any(l >= 2 for l in found):
                stages, chain = merge_view_stages(stages, chain, found)
                found = view_stages(stages, self.inputs[0])
            views = {j for l in found for j in (l - 1, l)}
        if self.bandwidth is None:
            if self.device.type == "cuda":
                from memplan.models.profiler import measure_host_link

                link = measure_host_link(self.device)
                self.bandwidth = float(min(link["h2d_bytes_per_s"], link["d2h_bytes_per_s"]))
                # paper 001's DYNPROG plans with each direction's speed (models.offload.link_speeds); the
                # joint DP takes one, the slower
                self.link001 = (float(link["d2h_bytes_per_s"]), float(link["h2d_bytes_per_s"]))
            else:
                self.bandwidth = float(chain.wabar[1:].sum() / chain.store_all_time())
        sf = self.stage_fractions[0] if base is self._cchain else math.nan      # nan: the eager chain
        self._offload = (stages, loss_stage, holder, chain, frozenset(views), sf)
        two = (f" (to the host {self.link001[0] / 1e9:.2f}, to the device {self.link001[1] / 1e9:.2f} GB/s: "
               "DYNPROG plans with both, the joint DP with the slower)" if isinstance(self.link001, tuple) else "")
        self._progress(f"offloading: on the {'compiled' if base is self._cchain else 'eager'} chain, link "
                       f"{self.bandwidth / 1e9:.2f} GB/s{two}" + (f", values {sorted(views)} not movable (views)"
                                                           if views else ""))

    def offload_fit(self, budget: float, tries: int = 3) -> Candidate | None:
        """Paper 001's DYNPROG schedule on the offloading chain (every forward kept, values moved whole),
        executed and measured (kind ``"chain-offload"``); see :meth:`_transfer_fit`."""
        return self._transfer_fit(budget, "chain-offload", tries)

    def joint_fit(self, budget: float, tries: int = 3) -> Candidate | None:
        """Paper 000's joint DP (re-materialization and offloading, :mod:`memplan.baselines.remat_offload_dp`,
        50 slots) on the offloading chain, its parts merged into whole transfers
        (:func:`memplan.baselines.remat_offload_dp.solve_whole_transfers`) and replayed within the limit, executed
        (:func:`~memplan.models.runtime_offload.execute_joint`) and measured (kind ``"chain-joint"``);
        see :meth:`_transfer_fit`."""
        return self._transfer_fit(budget, "chain-joint", tries)

    def _transfer_fit(self, budget: float, kind: str, tries: int) -> Candidate | None:
        """A schedule with transfers at ``budget`` minus the largest excess of a measured over a simulated
        peak so far for ``kind``, executed and measured (lowered by the excess and solved again while the
        measurement is over, ``tries`` solves at most); None where the budget needs no transfer (it holds
        store-all), none is feasible, the schedule moves a value that is a view of another, or the
        executor does not run it (``offload_note`` says which)."""
        from memplan.models.remat_offload import InvalidRematOffloadSchedule

        if self._offload is None:
            return None
        stages, loss_stage, holder, chain, views, sf = self._offload
        if kind not in self._transfer_solvers and self._no_time_for(
                "offloading plans" if kind == "chain-offload" else "joint plans"):
            return None
        lo, hi, solve = self._transfer_solver(kind, chain)
        limit = budget - self._off_offsets.get(kind, 0.0)
        for _ in range(tries):
            if limit < lo or limit >= hi:
                return None
            if self._no_time_for("offloading plans" if kind == "chain-offload" else "joint plans"):
                return None
            t0 = time.perf_counter()
            try:
                sched, run, predicted = solve(float(limit))
            except InvalidRematOffloadSchedule as e:
                self.offload_note = f"{kind}: a schedule the executor does not run: {_error_line(e)}"
                return None
            if sched is None:
                return None
            moved = tuple(sorted({t.index for t in sched.transfers if t.kind == "offload"}))
            if set(moved) & views:
                self.offload_note = (f"{kind}: a schedule moved a value that is a view of another "
                                     f"({sorted(set(moved) & views)})")
                return None
            key = (kind, sf, moved, (tuple(sched.ops), tuple((t.kind, t.index, round(t.release, 12))
                                                            for t in sched.transfers)))
            if key not in self.offload_plans:
                step = self._transfer_step(sched, run, kind)
                peak, ts = self._measure_plan(step)
                predicted = float(predicted)
                cand = Candidate("dynprog" if kind == "chain-offload" else "joint-dp", math.nan, peak,
                                 statistics.median(ts), ts, time.perf_counter() - t0, kind=kind,
                                 memory_limit=float(limit), predicted_peak=predicted, ops=key[3], stage_fraction=sf,
                                 offloaded=moved)
                self._off_offsets[kind] = max(self._off_offsets.get(kind, 0.0), peak - predicted)
                self.offload_plans[key] = (cand, step)
                self.offload_schedules[key] = sched
            cand = self.offload_plans[key][0]
            if cand.peak <= budget:
                return cand
            limit -= cand.peak - budget
        return None

    def _transfer_solver(self, kind: str, chain) -> tuple[float, float, Callable]:
        """(least memory, memory above which no transfer is needed, ``solve(limit) -> (schedule or None,
        executor, simulated peak)``) of ``kind`` on the offloading ``chain``, computed once per kind (the
        joint least memory is a search of its own); ``solve`` raises ``InvalidRematOffloadSchedule``
        for a schedule the executor does not run."""
        if kind not in self._transfer_solvers:
            self._transfer_solvers[kind] = self._new_transfer_solver(kind, chain)
        return self._transfer_solvers[kind]

    def _new_transfer_solver(self, kind: str, chain) -> tuple[float, float, Callable]:
        from memplan.baselines.transfer_plans import executable_transfers, transfer_range
        from memplan.models.remat_offload import InvalidRematOffloadSchedule

        beta = self._link(kind)
        method = "dynprog" if kind == "chain-offload" else "joint"

        def solve(limit):
            ex = executable_transfers(chain, method, limit, beta, time_limit=self._solver_seconds())
            if ex.schedule is None:
                if method == "joint":
                    self.offload_note = f"chain-joint: {ex.message}"
                return None, None, None
            if ex.plan is None:
                raise InvalidRematOffloadSchedule(ex.message)
            return ex.schedule, ex.run, ex.plan.replay.peak_memory

        return (*transfer_range(chain, method, beta), solve)

    def _link(self, kind: str):
        """The host link a transfer candidate of ``kind`` plans and runs with: paper 001's DYNPROG
        (``chain-offload``) takes both measured speeds where there are two (``link001``), the joint DP
        one, the slower (``bandwidth``)."""
        return self.link001 if kind == "chain-offload" and self.link001 is not None else self.bandwidth

    def _transfer_step(self, sched, run: Callable, kind: str) -> Callable:
        stages, loss_stage, _, chain, _, _ = self._offload
        link = self._link(kind)
        return self._executor_step(lambda x: run(stages, loss_stage, x, sched, chain, link,
                                                 device=self.device, input_grad=False, sync=False))

    def minimum(self) -> Candidate | None:
        """The candidate with the smallest measured peak (the chain's least-memory plan measured first);
        None only where :meth:`under`'s deadline left nothing measured."""
        if self._chain is not None:
            self.chain_plan(self.chain_minimum)
        for sf, c in self._cchains.items():
            self.chain_plan(self.compiled_chain_minimum_at(sf), compiled=sf)
        if self._mixed_sources() and not self._no_time_for("chain plans with a partitioner budget per stage"):
            self.mixed_plan(self.mixed_minimum())
        if self._multi is not None:
            self.multi_plan(self._multi[3])
        return min(self.measured(), key=lambda c: c.peak, default=None)

    def _runner(self, cand: Candidate) -> tuple[Callable, dict]:
        if cand.kind == "chain":
            return self.chain_plans[cand.plan_key][1], {}
        if cand.kind in ("chain-offload", "chain-joint"):
            return self.offload_plans[cand.plan_key][1], {}
        if cand.kind == "chain-compiled":
            return self.compiled_chain_plans[cand.plan_key][1], {}
        if cand.kind == "chain-mixed":
            return self.mixed_plans[cand.plan_key][1], {}
        if cand.kind == "chain-multi":
            return self.multi_plans[cand.plan_key][1], {}
        for c, step, cfg in self.compiled:
            if c is cand:
                return step, cfg
        raise KeyError(cand)

    def _remeasured_peak(self, cand: Candidate) -> int:
        """``cand``'s peak in a new window, after one step (the gradients exist, as in the search)."""
        import torch._functorch.config as fconfig

        step, cfg = self._runner(cand)
        with fconfig.patch(**cfg):
            step(*self.inputs)
            return _measure(lambda: step(*self.inputs), self.device, cuda_peak=self.cuda_peak)

    def _retime(self, fitting: list[Candidate]) -> None:
        """Time the fitting candidates within :data:`RETIME_MARGIN` of the fastest (the
        :data:`RETIME_MOST` fastest) again, one step each
        per round in rotating order, ``repeats`` rounds, adding to their timings (``step_time`` is the
        median of all): each candidate was timed when it was built, minutes apart from the others on a
        machine whose load changes, with few repeats; rounds side by side compare them under the same
        load, and the samples accumulate over the budgets asked."""
        import torch._functorch.config as fconfig

        if len(fitting) < 2:
            return
        best = min(c.step_time for c in fitting)
        near = sorted((c for c in fitting if c.step_time <= best * (1 + RETIME_MARGIN)),
                      key=lambda c: c.step_time)[:RETIME_MOST]
        if len(near) < 2:
            return
        if self._past(self._fit_deadline, int(self.repeats) * sum(c.step_time for c in near) + self._measure_cost()):
            return          # the rounds and the chosen step's measurement would pass under()'s deadline
        runners = [(c, *self._runner(c)) for c in near]
        clock = self._clock()
        for _ in range(int(self.repeats)):
            for c, step, cfg in runners:
                with fconfig.patch(**cfg):
                    c.step_times.append(self._timed_run(step, clock))
        for c in near:
            c.step_time = statistics.median(c.step_times)

    def _cut_by_time(self) -> list[str]:
        """What ``time_limit`` left untried, one entry per kind (empty when it cut nothing): the skipped
        fractions, the chain plans, the compiled-stage chains, the compiled loss chunks and the chain on
        multi-tensor cuts, from the notes the search wrote when it stopped each (they all say "within
        time_limit=")."""
        cut = []
        if self.skipped:
            cut.append(f"fractions {', '.join(f'{f:g}' for f in self.skipped)}")
        if "within time_limit=" in self.chain_note:
            return cut + ["chain plans"]          # none built: the compiled ones neither
        if any("within time_limit=" in n for n in self.compiled_chain_notes.values()):
            cut.append("chain plans with compiled stages")
        if "within time_limit=" in self.compiled_loss_chunks_note:
            cut.append("compiled loss chunks")
        if "within time_limit=" in self.loss_chunks_note:
            cut.append("the chunked loss stage")
        if "within time_limit=" in self.multi_note:
            cut.append("chain plans on multi-tensor cuts")
        return cut + [w for w in self._fit_cut if w not in cut]

    def under(self, memory: float | str, time_limit: float | None = None) -> BudgetedStep:
        """The fastest measured candidate whose measured peak is within ``memory`` (the smaller peak
        among equally fast ones; those within :data:`RETIME_MARGIN` of the fastest are first timed
        again side by side, :meth:`_retime`), measured again before it is returned; raises
        :class:`~memplan.models.solution.InfeasibleError` (``minimum``: the smallest peak measured,
        bytes) when none fits.

        ``time_limit`` (seconds, None: no limit) bounds this call: the plans solved for the budget, the
        side-by-side timings and a refusal's least-memory plans are not started where one more
        candidate's measurement (:meth:`_measure_cost`) and the chosen step's would pass it; the chosen
        step is always measured again. A refusal names what was not tried.
        :func:`compile_under_budget` passes what is left of its own ``time_limit``."""
        time_limit = _seconds_arg(time_limit, "time_limit")
        deadline = None if time_limit is None else time.perf_counter() + time_limit
        return self._under(_budget(memory), deadline, time_limit)

    def _under(self, budget: int, deadline: float | None, limit: float | None) -> BudgetedStep:
        """:meth:`under` with a ``time.perf_counter()`` deadline (None: none) and the limit it came from
        (seconds, for the messages)."""
        self._fit_deadline, self._fit_cut, self._fit_limit = deadline, [], limit
        try:
            return self._under_now(budget)
        finally:
            self._fit_deadline = None

    def _under_now(self, budget: int) -> BudgetedStep:
        import torch._functorch.config as fconfig

        self.rechecked = []
        if self.offload and self._offload is not None:
            self.offload_note = ""
        with _Preserved(self.model, self.params):
            if self._chain is not None:
                self.chain_fit(budget)
            for sf in self._cchains:
                self.chain_fit(budget, compiled=sf)
            self.mixed_fit(budget)
            self.multi_fit(budget)
            if self.offload:
                self.offload_fit(budget)
                self.joint_fit(budget)
            for attempt in range(2):
                peaks = {id(c): c.peak for c in self.measured()}
                for c in self.measured():
                    if budget < c.peak <= budget * (1 + PEAK_RECHECK) and not self._no_time_for(
                            "peaks within 1% over the budget measured again", 2 * c.step_time):
                        peaks[id(c)] = self._remeasured_peak(c)
                        self.rechecked.append((c.label, c.peak, peaks[id(c)]))
                self._retime([c for c in self.measured() if peaks[id(c)] <= budget])
                pairs = [(c, dataclasses.replace(c, peak=peaks[id(c)], fits=peaks[id(c)] <= budget))
                         for c in self.measured()]
                fitting = sorted((p for p in pairs if p[1].fits), key=lambda p: (p[1].step_time, p[1].peak))
                if fitting or attempt:
                    break
                # the plans solved for this budget measured above it: the least-memory plans may still fit
                # (a refusal must not state a smallest peak that is within the budget)
                known = len(self.measured())
                self.minimum()
                if len(self.measured()) == known:
                    break
            untried = (f" (not tried within time_limit={self.time_limit:g} s: fractions "
                       f"{', '.join(f'{f:g}' for f in self.skipped)})" if self.skipped else "")
            limit_s = self._fit_limit if self._fit_limit is not None else self.time_limit
            if not fitting and not self.measured():       # the deadline passed before any was measured
                err = InfeasibleError(
                    f"memory {fmt_memory(budget)}: no candidate was measured before time_limit={limit_s:g} s "
                    f"stopped the search (not tried: {'; '.join(self._cut_by_time())}); a longer time_limit may "
                    f"find one")
                err.candidates = []
                raise err
            if not fitting:
                best = self.minimum()
                cands = [dataclasses.replace(c, fits=c.peak <= budget) for c in self.measured()]
                what = (best.label if best.kind.startswith("chain")
                        else f"fraction {best.fraction:g}, knapsack {best.solver}")
                cut = self._cut_by_time()
                # the budget in bytes too where fmt_memory rounds it to a unit (385000 and 385032 bytes both
                # read 376.0 KiB); below 1 KiB it reads in whole bytes already
                in_bytes = fmt_bytes(budget) if budget >= 1024 else ""
                if cut:     # the smallest measured is not the smallest there is: say what was not tried
                    err = InfeasibleError(
                        f"memory {fmt_memory(budget)} is below every peak measured before time_limit="
                        f"{limit_s:g} s stopped the search ({len(cands)} candidate(s) measured; not "
                        f"tried: {'; '.join(cut)}): the smallest is {best.peak} bytes ({fmt_memory(best.peak)}, "
                        f"{what}){f', the budget {in_bytes} bytes' if in_bytes else ''}; a longer time_limit may "
                        f"find smaller ones", minimum=best.peak)
                else:
                    err = InfeasibleError(
                        f"memory {fmt_memory(budget)} is below every measured peak: "
                        f"{f'it is {in_bytes} bytes and ' if in_bytes else ''}the smallest is {best.peak} bytes "
                        f"({fmt_memory(best.peak)}, {what}); give at least that, or try other fractions{untried}",
                        minimum=best.peak)
                err.candidates = cands
                raise err
            cands = [c for _, c in pairs]
            for original, choice in fitting:
                step, cfg = self._runner(original)
                with fconfig.patch(**cfg):
                    step(*self.inputs)         # the gradients exist before the window opens (as in the search)
                peak, ts = self._measure_step(step, cfg)
                if self.device.type == "cuda" and peak <= budget:     # a second window: see PEAK_RECHECK
                    with fconfig.patch(**cfg):
                        peak = max(peak, _measure(lambda: step(*self.inputs), self.device, cuda_peak=self.cuda_peak))
                if peak > budget:
                    self.rechecked.append((f"{choice.label} (chosen)", choice.peak, peak))
                if peak <= budget:
                    return BudgetedStep(budget, choice.fraction, peak, statistics.median(ts), cands, self.backend,
                                        choice.solver, list(self.skipped), time.perf_counter() - self.t_start,
                                        kind=choice.kind, choice=choice, chain_note=self.chain_note,
                                        compiled_chain_note=self.compiled_chain_note,
                                        compiled_loss_chunks_note=self.compiled_loss_chunks_note,
                                        multi_note=self.multi_note,
                                        offload_note=self.offload_note if self.offload else "",
                                        untried=list(self._fit_cut), loss_chunks_note=self.loss_chunks_note,
                                        peak_measure=self.peak_measure, _fn=step, _config=cfg)
        raise InfeasibleError(
            f"memory {fmt_memory(budget)} ({fmt_bytes(budget)} bytes): every candidate that fitted measured above "
            f"it when run again{untried}",
            minimum=min(c.peak for c in cands))


def _error_line(e: BaseException, width: int | None = 160) -> str:
    """An exception as one short line for a note: its type and its message's first line (``width``
    characters; None: all of it, for an error quoted to say what to change)."""
    text = str(e)
    return f"{type(e).__name__}: {text.splitlines()[0][:width] if text else ''}"


def _in_forward(loss_stage) -> bool:
    """Whether a chunked loss stage takes its gradients in the forward (``ChunkedHeadLoss.grad_in_forward``)."""
    return bool(getattr(loss_stage, "grad_in_forward", False))


def _budget(memory) -> int:
    """The budget in whole bytes, a fraction of a byte rounded down (the measured peaks are whole bytes,
    so a peak fits ``1.5`` exactly when it fits 1: the answer is the same); a budget below one byte is
    refused at once, as a non-positive one is (every candidate's peak is above it, so the whole search
    ran, 29 s on a tiny GPT-2, only to refuse it, as ``0 B``)."""
    try:
        budget = parse_memory(memory)
    except UnitError as e:
        raise InputError(f"compile_under_budget: memory {memory!r} is not understood ({e}); e.g. '300MiB'") from None
    if not math.isfinite(budget):
        raise InputError(f"compile_under_budget: memory {memory!r} is not finite")
    if budget <= 0:
        raise InputError(f"compile_under_budget: memory {memory!r} must be a positive quantity, e.g. '300MiB'")
    if budget < 1:
        raise InputError(f"compile_under_budget: memory {memory!r} is less than one byte (the budget is whole bytes, "
                         f"a fraction of one rounded down); e.g. '300MiB'")
    return int(budget)


def compile_under_budget(model, example_inputs: Sequence[Any], memory: float | str, *,
                         loss_fn: Callable | None = None, example_targets: Sequence[Any] = (),
                         backend: str = "aot_eager_decomp_partition", solver: str = "pytorch",
                         fractions: Sequence[float] | None = None, repeats: int = 3,
                         solver_time_limit: float | None = 10.0,
                         time_limit: float | None = None, chain: bool = True,
                         compiled_stages: bool = True, stage_fractions: Sequence[float] = (1.0,),
                         stage_solver: str = "memplan-peak", runtime_estimator: str = "flops",
                         progress: Callable[[str], None] | None = None, offload: bool | str = False,
                         bandwidth: float | str | None = None,
                         cuda_peak: str = "requested") -> BudgetedStep:
    """A training step of ``model`` whose measured peak memory fits ``memory`` bytes: the fastest of
    ``torch.compile`` at PyTorch's budget fractions and memplan's chain plans.

    Parameters
    ----------
    model : torch.nn.Module
        Its parameters (and gradients, which the warm-up step creates) are not counted in the peak.
    example_inputs : tuple or list of tensors
        The model's inputs (``model(*example_inputs)``), with the shapes of training. The model's
        forward and the loss are run once on the examples, without autograd, before anything else: an
        error there is an ``InputError`` quoting it. For the chain plans the first must be a tensor (the
        chain's a^0); the others (an attention mask) are read inside the stages, each call's own, and
        one that is not a tensor (a count, a flag) is fixed at the example's value
        (:class:`memplan.models.graph.ContextInputs`). The model may return its tensor inside a dict,
        a (named) tuple or a list (``loss_fn`` gets the structure back), compute part of it under
        ``torch.no_grad()``, and have frozen first layers (folded into the first trained stage).
        Called inside a ``torch.autocast`` block, the search measures the steps in it (call the step
        in the same block); a model that switches autocast inside its forward gets no chain plans.
    memory : float or str
        The budget for what one step adds on top of parameters, gradients and inputs: bytes, or a
        string with units (``"1.5GiB"``); at least one byte. A fraction of a byte is rounded down: the
        measured peaks are whole bytes, so the answer is the same.
    loss_fn : callable, optional
        ``loss_fn(output, *targets) -> scalar``. None: the model's output is the loss (a scalar).
    example_targets : tuple or list of tensors
        The targets passed to ``loss_fn`` (which they need); the step is then called
        ``step(*inputs, *targets)``.
    backend : {'aot_eager_decomp_partition', 'inductor'}
        ``torch.compile`` backend; both use PyTorch's min-cut partitioner, which honours the budget.
    solver : {'pytorch', 'memplan', 'memplan-peak', 'both', 'all'}
        The partitioner's knapsack: PyTorch's ``dp_knapsack``, memplan's exact MILP of the same
        knapsack (:class:`MemplanKnapsack`), memplan's peak-aware MILP (:class:`MemplanPeakSolver`:
        memory modelled over the joint graph's order, never worse than ``dp_knapsack`` in that model),
        ``both`` (``pytorch`` and ``memplan``: every fraction compiled with each) or ``all`` (the
        three). The measured choice is at least as good as each one's alone. Anything but
        ``'pytorch'`` needs ``fractions``.
    fractions : tuple or list of distinct floats in [0, 1], optional
        PyTorch budget fractions to try (default :data:`DEFAULT_FRACTIONS`; empty: chain plans only).
        Every one is compiled and measured: the measured peak is not monotonic in the fraction.
    repeats : int
        Timed steps per candidate (the median is kept).
    solver_time_limit : float or None
        Seconds per MILP for ``solver="memplan"``, and per rotor solve (positive, or None).
    time_limit : float or None
        Seconds for the whole call. The first fraction is compiled first, then the chains are
        built, then the other fractions, then the plans for the budget are solved and measured. A
        compile cannot be interrupted, so the limit is kept by not starting a part that would overrun
        it: a fraction (estimated as twice the slowest candidate so far), a chain's profile (stopped at the
        next stage past its share; the chunked loss stage's and the compiled stages' chains are not
        started where one as long as the eager chain's would not end in time), a plan's measurement
        (``repeats`` + 2 steps of the slowest step so far). The search keeps two such measurements for
        the end: the chain's plan for the budget and the chosen step, measured again. What can overrun
        the limit: the first candidate, which always runs (there is then an answer), one stage's
        profile, and the chosen step's last measurement. Skipped fractions are listed in ``skipped``;
        what was not tried is named in the refusal's message (and in ``chain_note``,
        ``compiled_chain_note``, ``loss_chunks_note``). ``benchmarks/check_budget_time_limits.py``
        times the whole call against the limit.
    runtime_estimator : {'flops', 'measured'}
        The recompute costs the partitioner's knapsack (PyTorch's or memplan's) weighs: PyTorch's FLOP
        count (``"flops"``, PyTorch's default: every pointwise operation and reduction counts the same
        minimum), or each candidate operation timed alone on the step's device, equal signatures once
        (``"measured"``, :func:`memplan.models.op_timing.measured_estimator`; it needs ``fractions``
        or a stage fraction below 1).
    chain : bool
        (True or False, as every flag here.) Also try memplan's chain plans (:class:`BudgetSearch`):
        the model cut into stages, rotor's re-materialization plan for the budget, run eagerly (per
        stage, autograd inside a stage).
        They can reach budgets below every fraction's peak (fraction 0 recomputes the whole forward
        inside the backward at once, rotor's least-memory plans stage by stage); their floor is the
        chain's largest stage. Where the model can also be cut where several tensors cross
        (``linearize_model(..., cuts="auto")``: a U-Net's skips), that chain is a candidate too (kind
        ``"chain-multi"``, :meth:`BudgetSearch._build_multi`) where its least memory is 1% lower. A
        language model's head with its cross-entropy is split over chunks of
        tokens when ``loss_fn`` says how its loss splits over them (a
        :class:`~memplan.models.chunked_loss.TokenLoss`: ``memplan.TokenCrossEntropy()``,
        ``loss_fn(logits, targets)``): the logits are recomputed chunk by chunk in the backward
        (:class:`~memplan.models.chunked_loss.ChunkedHeadLoss`), something PyTorch's budget knob
        does not do; the chunk counts are chosen by :meth:`BudgetSearch._build_chunked` (each count
        on the way down to the least memory is a chain of its own, the fastest that reaches the budget
        taken) and named in the chosen candidate's label.
    compiled_stages : bool
        With ``chain``, also rotor's plans over the chain's stages each compiled by ``torch.compile``
        with ``backend`` (:mod:`memplan.models.compiled`; kind ``"chain-compiled"``): rotor across
        stages, the compiler within a stage (fused kernels, its own keep-or-recompute choice).
        Their chain is profiled with c10's allocator events, which see compiled code. Costs one
        compile per stage and grad mode. Where the eager chain chunks its loss stage, the compiled
        chain also gets that loss stage with each chunk compiled (labels "compiled stages, ...,
        loss in k chunks"): compiled plans below the whole compiled loss stage's floor.
    stage_fractions : sequence of floats in [0, 1]
        With ``compiled_stages``: one compiled chain per fraction, its stages compiled with PyTorch's
        ``activation_memory_budget`` at that fraction (1, the default ``(1.0,)``: the partitioner's own
        choice), so that each stage's F_all saves fewer bytes and recomputes more inside its backward;
        rotor's plans on every chain are candidates (labels name the fraction). With two fractions or
        more, rotor's DP also chooses the fraction per stage (kind ``"chain-mixed"``,
        :mod:`memplan.baselines.remat_variants`: exact over every assignment, so in the model never
        slower than one fraction for all). Each extra fraction costs a compile per stage and grad mode.
        Anything but ``(1.0,)`` needs ``chain`` and ``compiled_stages``.
    stage_solver : {'memplan-peak', 'pytorch', 'memplan'}
        The partitioner's keep-or-recompute solver in stages compiled at a fraction below 1:
        :class:`MemplanPeakSolver` (:mod:`memplan.formulations.peak_milp`), ``dp_knapsack``, or
        :class:`MemplanKnapsack`. Anything but the default needs a stage fraction below 1.

    offload : False, True or 'emulated'
        Also try offloading (:mod:`memplan.models.runtime_offload`) on the compiled chain (the eager one
        without it): paper 001's DYNPROG schedule for the budget, every stage's forward kept and chosen
        values sent whole to the host and back while the step runs (kind ``"chain-offload"``), and paper
        000's joint DP, recomputation and offloading, its transfers merged into whole values (kind
        ``"chain-joint"``). True
        needs a CUDA device; ``'emulated'`` runs it on a CPU with the host emulated by memory the
        measurement does not see (for tests: the measured peak then leaves the host's bytes out, as a
        GPU's would, but the copies cost what a memcpy costs). The executors' CUDA path ran on an H100
        (``benchmarks/results/offload_exec_gpu_gpt2.csv``); as candidates here they have not yet. The
        plans run on the chain: offloading needs ``chain``.
    bandwidth : float, str or None
        The host link for ``offload`` (bytes/s or ``"12GB/s"``; refused without it); None: measured on
        CUDA (DYNPROG plans and runs with each direction's speed, the joint DP, which takes one, with the
        slower), all of the chain's saved bytes in one store-all step when emulated.
    progress : callable or None
        Called with one line of text as each part of the search ends (a fraction compiled and measured,
        the chain profiled, the compiled stages profiled, fractions left out by ``time_limit``): a
        search on a GPU can take minutes. ``memplan budget`` prints the lines on stderr.
    cuda_peak : {'requested', 'allocated'}
        On CUDA, which of the caching allocator's peaks is compared with the budget, for every
        candidate alike: the bytes the step's tensors asked for (``requested_bytes``, the default:
        the same in every measuring window), or ``max_memory_allocated`` (those bytes rounded to 512,
        plus the unsplit rest of reused cached blocks, which depends on what ran before: up to 0.09%
        apart between two windows of one step on an H100). The report names the one used
        (``BudgetedStep.peak_measure``); ``bench_budget.py`` keeps both. On a CPU (one method there)
        only the default is accepted.

    The search runs training steps on ``model``; the parameters' gradients and the model's buffers are
    restored when it ends (the parameters themselves do not change: there is no optimizer step). A
    chain plan that recomputes a batch-norm stage leaves its running statistics as one eager step does
    (the executor puts back what a recomputation writes; ``torch.utils.checkpoint`` updates them
    again). A model whose forward writes a buffer itself (``self.steps += 1``) gets no chain plans
    (``chain_note`` names the buffer): the traced stages would not write it.

    With dropout (any random operation) the candidates do not draw the same masks: a compiled step's
    (a fraction's, or compiled stages') are not the ones eager autograd draws from the same random
    state, so for one seed its gradients are not an eager step's (each is a training step, with its own
    masks). Gradients equal eager autograd's only with dropout 0, as the tests and ``bench_budget.py``
    compare them.

    Returns
    -------
    BudgetedStep
        The fastest measured candidate whose measured peak is within the budget (the smaller peak
        among equally fast ones), measured again before it is returned.

    Raises
    ------
    InputError
        A bad option, one given where nothing uses it (``bandwidth`` without ``offload``, ``cuda_peak``
        on a CPU, ``stage_fractions`` without compiled stages, ...), or examples the model's forward or
        the loss fails on. ``InfeasibleError`` (``minimum``: the smallest peak measured) when no candidate fits.
    """
    budget = _budget(memory)
    search = BudgetSearch(model, example_inputs, loss_fn=loss_fn, example_targets=example_targets,
                          backend=backend, solver=solver, fractions=fractions, repeats=repeats,
                          solver_time_limit=solver_time_limit, time_limit=time_limit, chain=chain,
                          compiled_stages=compiled_stages, stage_fractions=stage_fractions,
                          stage_solver=stage_solver, runtime_estimator=runtime_estimator, progress=progress,
                          offload=offload, bandwidth=bandwidth, cuda_peak=cuda_peak)
    return search._under(budget, search._deadline, search.time_limit)
