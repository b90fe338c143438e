"""Train under a byte budget inside ``torch.compile`` (issue 28, first slice).

:func:`compile_under_budget` compiles a model's training step (forward, loss, backward) at several of
PyTorch's ``activation_memory_budget`` fractions, runs each candidate, measures its peak memory and
its step time, and returns the fastest one whose measured peak fits the budget in bytes. A budget below
every measured peak is refused (:class:`~memplan.models.solution.InfeasibleError` with the smallest
peak measured), so the refusal happens here and not as an out-of-memory at run time.

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
exactly, MIP-started from ``dp_knapsack``'s answer. It is not yet the peak-aware model of issue 28.
"""
from __future__ import annotations

import math
import statistics
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from memplan.models.solution import InfeasibleError, InputError
from memplan.models.units import fmt_memory, parse_memory

#: the default grid of PyTorch's budget fractions (the fractions of issue 28's benchmark, and 0)
DEFAULT_FRACTIONS = (1.0, 0.7, 0.5, 0.3, 0.2, 0.1, 0.05, 0.0)
BACKENDS = ("aot_eager_decomp_partition", "inductor")
SOLVERS = ("pytorch", "memplan", "both")


def _knapsack_solver_class():
    """:class:`MemplanKnapsack`, built on first use (its base class lives in torch, imported lazily)."""
    global _MEMPLAN_KNAPSACK
    if _MEMPLAN_KNAPSACK is not None:
        return _MEMPLAN_KNAPSACK
    from torch._inductor.custom_graph_pass import CustomKnapsackSolver

    class MemplanKnapsack(CustomKnapsackSolver):
        """PyTorch's partitioner knapsack (saved vs recomputed candidates under the budget fraction),
        solved exactly by :func:`memplan.formulations.knapsack_milp.solve_knapsack` with PyTorch's own
        ``dp_knapsack`` answer as MIP start, so its objective (recompute runtime, PyTorch's runtime
        estimate) is never worse than ``dp_knapsack``'s in that model. It is a knapsack over saved
        bytes, not a model of the backward's memory over time. ``calls`` records each call:
        items, capacity, both objectives, the solve time."""

        def __init__(self, time_limit: float | None = 10.0, threads: int | None = 1):
            self.time_limit = time_limit
            self.threads = threads
            self.calls: list[dict[str, Any]] = []

        def __call__(self, memory, joint_graph, max_memory, node_info, all_recomputable_banned_nodes):
            from torch._functorch._activation_checkpointing.knapsack import dp_knapsack
            from torch._functorch.partitioners import estimate_runtime

            from memplan.formulations.knapsack_milp import knapsack_value, solve_knapsack

            t0 = time.perf_counter()
            # the runtimes PyTorch gave its own solver (it does not pass them to a custom one)
            runtimes = [float(estimate_runtime(node)) for node in all_recomputable_banned_nodes]
            _, dp_saved, _ = dp_knapsack(list(memory), runtimes, max_memory)
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


def memplan_knapsack(time_limit: float | None = 10.0, threads: int | None = 1):
    """A :class:`MemplanKnapsack` for ``torch._functorch.config.activation_memory_budget_solver``."""
    return _knapsack_solver_class()(time_limit=time_limit, threads=threads)


@dataclass
class Candidate:
    solver: str                       # the partitioner's knapsack: "pytorch" or "memplan"
    fraction: float
    peak: int                         # measured bytes above parameters, gradients and inputs
    step_time: float                  # median seconds of a training step (profiler off)
    step_times: list[float]
    compile_time: float               # seconds of the first call (trace, partition, compile)
    fits: bool = False


@dataclass
class BudgetedStep:
    """A compiled training step: ``step(*inputs, *targets)`` runs forward, loss and backward
    (gradients accumulate in the parameters' ``.grad``, as ``loss.backward()`` does) and returns the
    loss (detached). ``fraction`` is PyTorch's budget it was compiled with, ``peak`` its measured peak,
    ``candidates`` every candidate measured during the search."""

    budget: int
    fraction: float
    peak: int
    step_time: float
    candidates: list[Candidate]
    backend: str
    solver: str                       # the chosen candidate's knapsack
    skipped: list[float] = field(default_factory=list)   # fractions not tried (time_limit)
    search_time: float = 0.0
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
        lines = [f"budget {fmt_memory(self.budget)}: chose fraction {self.fraction:g} "
                 f"(peak {fmt_memory(self.peak)}, step {self.step_time * 1e3:.2f} ms), "
                 f"backend {self.backend}, solver {self.solver}, search {self.search_time:.1f} s"]
        for c in self.candidates:
            lines.append(f"  {c.solver:<7} fraction {c.fraction:<5g} peak {fmt_memory(c.peak):>10}  step "
                         f"{c.step_time * 1e3:8.2f} ms  compile {c.compile_time:6.2f} s  "
                         f"{'fits' if c.fits else 'over'}")
        if self.skipped:
            lines.append(f"  not tried (time_limit): {', '.join(f'{f:g}' for f in self.skipped)}")
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


def _measure(run, device) -> int:
    from memplan.models.memory import CudaMemoryTracker, profiler_peak

    if device.type == "cuda":               # max_memory_allocated - base, after synchronizes
        with CudaMemoryTracker(device) as tr:
            run()
            tr.sync()
            return int(tr.peak)
    if device.type != "cpu":
        raise InputError(f"compile_under_budget: cannot measure memory on device {device.type!r} (cpu or cuda)")
    _, peak, _ = profiler_peak(run)
    return int(peak)


def compile_under_budget(model, example_inputs: Sequence[Any], memory: float | str, *,
                         loss_fn: Callable | None = None, example_targets: Sequence[Any] = (),
                         backend: str = "aot_eager_decomp_partition", solver: str = "pytorch",
                         fractions: Sequence[float] | None = None, repeats: int = 3,
                         solver_time_limit: float | None = 10.0,
                         time_limit: float | None = None) -> BudgetedStep:
    """Compile ``model``'s training step so that its measured peak memory fits ``memory`` bytes.

    Parameters
    ----------
    model : torch.nn.Module
        Its parameters (and gradients, which the warm-up step creates) are not counted in the peak.
    example_inputs : sequence of tensors
        The model's inputs (``model(*example_inputs)``), with the shapes of training.
    memory : float or str
        The budget for what one step adds on top of parameters, gradients and inputs: bytes, or a
        string with units (``"1.5GiB"``).
    loss_fn : callable, optional
        ``loss_fn(output, *targets) -> scalar``. None: the model's output is the loss (a scalar).
    example_targets : sequence of tensors
        The targets passed to ``loss_fn``; the step is then called ``step(*inputs, *targets)``.
    backend : {'aot_eager_decomp_partition', 'inductor'}
        ``torch.compile`` backend; both use PyTorch's min-cut partitioner, which honours the budget.
    solver : {'pytorch', 'memplan', 'both'}
        The partitioner's knapsack: PyTorch's ``dp_knapsack``, memplan's exact MILP
        (:class:`MemplanKnapsack`), or both (every fraction compiled with each; twice the compiles,
        and the measured choice is at least as good as either's alone).
    fractions : sequence of floats in [0, 1], optional
        PyTorch budget fractions to try (default :data:`DEFAULT_FRACTIONS`). Every one is compiled and
        measured: the measured peak is not monotonic in the fraction.
    repeats : int
        Timed steps per candidate (the median is kept).
    solver_time_limit : float or None
        Seconds per MILP for ``solver="memplan"``.
    time_limit : float or None
        Seconds for the search. A compile cannot be interrupted, so the limit is kept by not starting a
        candidate when it, plus the final recompile (each estimated as the slowest candidate so far),
        would overrun it; the first candidate and the final recompile always run, so a limit shorter
        than about two compiles is overrun. Skipped fractions are listed in ``skipped`` (and in the
        refusal's message).

    The search runs training steps on ``model``; the parameters' gradients and the model's buffers are
    restored when it ends (the parameters themselves do not change: there is no optimizer step).

    Returns
    -------
    BudgetedStep
        The fastest measured candidate whose measured peak is within the budget (the smaller peak
        among equally fast ones), recompiled and measured again before it is returned.

    Raises
    ------
    InputError
        A bad option. ``InfeasibleError`` (``minimum``: the smallest peak measured) when no candidate fits.
    """
    import torch
    import torch._functorch.config as fconfig

    budget = parse_memory(memory)
    if not math.isfinite(budget):
        raise InputError(f"compile_under_budget: memory {memory!r} is not finite")
    budget = int(budget)
    if backend not in BACKENDS:
        raise InputError(f"compile_under_budget: backend {backend!r} is not supported; use one of "
                         f"{', '.join(BACKENDS)}")
    if solver not in SOLVERS:
        raise InputError(f"compile_under_budget: solver {solver!r} is unknown; use one of {', '.join(SOLVERS)}")
    if not isinstance(model, torch.nn.Module):
        raise InputError(f"compile_under_budget: model must be a torch.nn.Module, got {type(model).__name__}")
    fracs = list(DEFAULT_FRACTIONS if fractions is None else fractions)
    if not fracs or any(not isinstance(f, (int, float)) or not 0 <= f <= 1 for f in fracs):
        raise InputError(f"compile_under_budget: fractions must be numbers in [0, 1], got {fractions!r}")
    if time_limit is not None and not (isinstance(time_limit, (int, float)) and time_limit > 0):
        raise InputError(f"compile_under_budget: time_limit must be a positive number of seconds or None, "
                         f"got {time_limit!r}")
    if not isinstance(repeats, int) or repeats < 1:
        raise InputError(f"compile_under_budget: repeats must be >= 1, got {repeats!r}")
    inputs = tuple(example_inputs) + tuple(example_targets)
    n_inputs = len(tuple(example_inputs))
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise InputError("compile_under_budget: the model has no parameter that requires a gradient")
    device = params[0].device

    # the search runs training steps: gradients and buffers (batch norm's running statistics) are put
    # back as they were when it ends
    saved_grads = [None if p.grad is None else p.grad.detach().clone() for p in params]
    saved_buffers = [(b, b.detach().clone()) for b in model.buffers()]
    with torch.no_grad():
        out = model(*inputs[:n_inputs])
        probe = loss_fn(out, *inputs[n_inputs:]) if loss_fn is not None else out
    with torch.no_grad():                         # the probe ran a training-mode forward
        for buf, v in saved_buffers:
            buf.copy_(v)
    if not (isinstance(probe, torch.Tensor) and probe.numel() == 1):
        raise InputError("compile_under_budget: the loss must be a scalar tensor: pass loss_fn "
                         "(loss_fn(output, *targets)) when the model does not return its loss")
    del out, probe

    def config_for(frac: float, knapsack: str) -> dict:
        cfg = {"activation_memory_budget": float(frac)}
        if knapsack == "memplan":
            cfg["activation_memory_budget_solver"] = memplan_knapsack(time_limit=solver_time_limit)
        return cfg

    def build(frac: float, knapsack: str, tag: str):
        cfg = config_for(frac, knapsack)
        compiled = torch.compile(_fresh_step(model, loss_fn, n_inputs, tag), backend=backend)

        def step(*args):
            loss = compiled(*args)
            loss.backward()
            return loss.detach()

        with fconfig.patch(**cfg):
            t0 = time.perf_counter()
            step(*inputs)                        # compiles; creates the gradients if missing
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            compile_time = time.perf_counter() - t0
        return step, cfg, compile_time

    def measure(step, cfg) -> tuple[int, list[float]]:
        with fconfig.patch(**cfg):
            peak = _measure(lambda: step(*inputs), device)
            ts = []
            for _ in range(int(repeats)):
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                t0 = time.perf_counter()
                step(*inputs)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                ts.append(time.perf_counter() - t0)
        return peak, ts

    candidates: list[Candidate] = []
    skipped: list[float] = []
    t_start = time.perf_counter()
    slowest = 0.0                                 # the longest compile + measurement so far
    try:
        knapsacks = ("pytorch", "memplan") if solver == "both" else (solver,)
        plan = [(frac, knapsack) for frac in fracs for knapsack in knapsacks]
        for k, (frac, knapsack) in enumerate(plan):
            elapsed = time.perf_counter() - t_start
            if candidates and time_limit is not None and elapsed + 2 * slowest > time_limit:
                skipped = list(dict.fromkeys(float(f) for f, _ in plan[k:]))
                break
            t0 = time.perf_counter()
            step, cfg, ct = build(frac, knapsack, f"{id(model):x}_{k}")
            peak, ts = measure(step, cfg)
            slowest = max(slowest, time.perf_counter() - t0)
            candidates.append(Candidate(knapsack, float(frac), peak, statistics.median(ts), ts, ct,
                                        peak <= budget))
            del step
        untried = (f" (not tried within time_limit={time_limit:g} s: fractions "
                   f"{', '.join(f'{f:g}' for f in skipped)})" if skipped else "")
        fitting = sorted((c for c in candidates if c.fits), key=lambda c: (c.step_time, c.peak))
        if not fitting:
            best = min(candidates, key=lambda c: c.peak)
            err = InfeasibleError(
                f"memory {fmt_memory(budget)} is below every measured peak: the smallest is "
                f"{best.peak} bytes ({fmt_memory(best.peak)}, fraction {best.fraction:g}, knapsack "
                f"{best.solver}); give at least "
                f"that, or try other fractions{untried}", minimum=best.peak)
            err.candidates = candidates
            raise err
        for choice in fitting[:1] if time_limit is not None else fitting:   # recompile it, check again
            step, cfg, _ = build(choice.fraction, choice.solver, f"{id(model):x}_final")
            peak, ts = measure(step, cfg)
            if peak <= budget:
                return BudgetedStep(budget, choice.fraction, peak, statistics.median(ts), candidates,
                                    backend, choice.solver, skipped, time.perf_counter() - t_start, step, cfg)
        raise InfeasibleError(
            f"memory {fmt_memory(budget)}: the candidate that fitted measured above it when recompiled"
            f"{untried}",
            minimum=min(c.peak for c in candidates))
    finally:
        with torch.no_grad():
            for p, g in zip(params, saved_grads):
                p.grad = g
            for b, v in saved_buffers:
                b.copy_(v)
