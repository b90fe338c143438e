"""Run re-materialization plans for real and compare with the simulator (issue 20, item 3).

For each network: build it, linearize it, profile the chain in the same process
(:func:`memplan.models.profiler.profile_chain`), and at memory limits a fraction of the way from the
smallest feasible memory to store-all's peak (:func:`memplan.remat.memory_range`) solve with
:func:`memplan.remat.solve` for each method (``rotor``, ``rotor-floating``, ``sequential``,
``store-all``); execute every sequence found with :func:`memplan.models.runtime.execute` and record,
one CSV row per (network, limit, method):

* ``grads_equal``: every parameter gradient ``torch.equal`` to plain autograd's (on CUDA with
  ``torch.use_deterministic_algorithms(True)``; ``deterministic`` says when an operation had no
  deterministic kernel and the run fell back to ``warn_only``); ``grads_max_rel_diff``: otherwise the
  largest difference, relative to the parameter's largest gradient. A parameter shared by three
  stages or more whose B's run in separate backward calls gets its contributions summed in another
  order than autograd's (the Transformer's tied embedding: about 4e-8): rows within
  :data:`memplan.models.runtime.GRAD_REL_TOL` are counted as autograd's gradients, others as different;
* ``predicted_peak`` / ``measured_peak``: the simulator's peak on the profiled chain against the
  measured one (CPU: ``memory_method``, below; CUDA: caching-allocator statistics), and
  ``within_limit``: measured peak <= the limit. The replay charges each forward its own overhead
  (:attr:`Chain.of_all`, :attr:`Chain.of_ng`), as the solvers plan (files before 2026-11-28 have a
  column ``predicted_peak_executed`` for it, when ``predicted_peak`` charged both forwards the larger);
* ``memory_method``: how the peaks were measured and the chain's sizes profiled, one method for every
  contender (``--memory-method``). On a CPU ``profiler`` (the default since 2026-11-28; files before
  have ``dispatch``) counts c10's allocator events (:class:`models.memory.ProfilerTracker`,
  ``../shared/guide/MEASURING.md``): every allocation, a kernel's own scratch included (a CPU
  convolution's backward takes a 9 MiB buffer on ResNet-50 at 224). A plan's ``measured_peak`` is then
  its fully held run's, the timed runs' holds come from the replay of the chain profiled the same way
  (every B within 1% of its peak), and the per-operation traces are the dispatch tracker's.
  ``dispatch`` counts the tensors' storages that operations dispatched through PyTorch's Python
  dispatcher make (what the model has, not the scratch), operation by operation: the traces then peak
  at the row's measured peak. CUDA: the allocator's statistics;
* ``holds``: how the network's runs held (``--holds``; ``auto``, the default since 2026-11-29, is
  ``none`` where the profile has the free record, single-tensor cuts and stages not compiled, and
  ``peak`` elsewhere; files before have ``peak`` unless their command says otherwise);
* ``timed_peak`` / ``held_stages``: the timed runs hold a fused backward group's a^j and delta^j
  until B^j ends (as the model has them) only for the B's where the measured run peaks
  (``--holds peak``: :func:`memplan.models.runtime.holds_at_peak`, two hooks per such B
  instead of one per junction, about 5 us each on a CPU; and a group's backward called directly,
  without the Python root, where its B's have the room for it); ``timed_peak`` is that configuration's own
  peak, measured as autograd's is (:func:`memplan.models.memory.step_peak`): the held run's to the
  byte where the holds work as they should (the summary counts the rows where it is not).
  ``--holds all`` holds every B, as before 2026-11-28; ``--holds none`` (since 2026-11-28, session 32)
  runs every sequence without holds, freeing as autograd does, measures that run's peak and compares it
  with the replay of the executor so (:func:`memplan.models.remat.free_backward_model`, from the
  profile's ``free_backward`` record); the solvers then plan in it (:func:`memplan.models.remat.free_backward_chain`:
  its backward overheads, those below zero raised to 0; before 2026-11-29 in paper 004's model, an
  upper bound);
* ``predicted_time`` / ``measured_time``: the simulator's makespan against the executor's time, CUDA
  synchronized before and after, and ``throughput`` = batch / measured time (samples per second).
  The plans are solved on the chain profiled first (in context, :func:`memplan.models.runtime.time_in_context`);
  their predicted time is the makespan on that chain re-timed during the timing rounds themselves
  (more contenders: a store-all run with per-operation timers, the medians scaled to the store-all
  runs of the same rounds; and :func:`memplan.models.remat.turn_ops`, a warm-up sweep without a tape,
  every stage's second no-grad run, then each stage recomputed with a tape right before its backward
  step, timed per operation and whole, which gives
  the no-grad forwards' own times ``uf_ng`` and the cost of a turn ``u_turn``, :class:`Chain`), so that
  a machine whose pace drifts between the profile and the runs (a shared CPU) does not count as model
  error; ``predicted_time_profile`` is the makespan on the first profile (the papers' time model).
  The first profile calibrates the turn model too (``profile_chain(turns=True)``), so rotor,
  ``sequential`` and store-all plan with it; rotor-floating plans in the papers' time model and says
  so (:func:`memplan.remat.solve`).
  Before the turn model (2026-11-27) the tiny GPT-2's rotor plans were up to 6.9% slower than
  predicted (``benchmarks/time_model_turns.py``).
  Every run of a network (plans, store-all, autograd, checkpoint_sequential) is timed in alternation,
  one run each per round in rotating order, until the 95% interval of every median is within
  ``--target`` (2%) of it (:mod:`memplan.models.measure`); ``time_low`` / ``time_high`` are that
  interval, ``repeats`` the rounds, and ``noisy`` marks a row whose interval stayed wider.
  ``time_q10`` / ``time_rel_err_q10``: the 10th-percentile sample and its error against the prediction
  (on the H100 every plan's was within 2.8% where the sequential plans' medians were up to 19% above:
  the model predicts the undisturbed step, disturbances move the median).
  ``vs_autograd`` (``_low``/``_high``): the row's time over plain autograd's, paired round by round
  (:func:`memplan.models.measure.paired_ratio`), with the 95% interval of that median.

A method without a plan at a limit (store-all below its peak) gets a row with its status and no
measurement; store-all and plain autograd (``loss.backward()`` on the unsplit model) are also run at
``fraction`` 1 (the store-all peak). Identical sequences are executed once.

``--throughput CSV`` adds paper 004's comparison (section 5.5): PyTorch's ``checkpoint_sequential``
with 10 numbers of segments from 2 to 2 sqrt(L) (executed both as memplan's sequence and by
``torch.utils.checkpoint.checkpoint_sequential`` itself where the input is a float tensor), rotor at the
memory each of them needs (its simulated peak), and store-all; ``rotor_gain`` = rotor's throughput over
sequential's minus 1 (the paper reports +12.8% on average at the best sequential point).

    python -m memplan.experiments.runtime_check                                  # CPU, small networks
    python -m memplan.experiments.runtime_check --device cuda --out benchmarks/results/runtime_gpu.csv \\
        --throughput benchmarks/results/throughput_gpu.csv                      # ResNet-50/101, GPT-2 small
    python -m memplan.experiments.runtime_check --device cpu --quick --out /tmp/rt.csv   # dry run, seconds
"""
from __future__ import annotations

import argparse
import copy
import csv
import dataclasses
import gc
import json
import math
import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

from memplan import remat
from memplan.baselines.remat_heuristics import sequential_schedule, store_all_schedule
from memplan.experiments.cli_checks import (CliError, OneLineParser, device_problem, output_file, positive_int,
                                            positive_number, repeated, run_script, writing)
from memplan.models.measure import paired_ratio
from memplan.models.remat import simulate_remat
from memplan.models.solution import InputError
from memplan.models.units import fmt_memory

_TINY_GPT = dict(n_layer=4, n_embd=64, n_head=4, vocab=256, n_ctx=64, dropout=0.1)
#: presets: network -> constructor keywords, per-sample input shape, batch
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    # the networks this script ran on before issue 20 (CPU, seconds per sequence)
    "small": {"resnet18": dict(kw={}, shape=(3, 64, 64), batch=2),
              "gpt2": dict(kw=_TINY_GPT, shape=(32,), batch=2)},
    # a dry run: tiny inputs, the whole script in seconds on a CPU
    "quick": {"resnet18": dict(kw={}, shape=(3, 32, 32), batch=2),
              "gpt2": dict(kw=dict(n_layer=2, n_embd=32, n_head=4, vocab=50, n_ctx=16, dropout=0.1), shape=(8,),
                           batch=2)},
    # issue 20 on the GPU: the papers' settings (paper 004's batch 32 at 224; GPT-2 small, sequence 1024)
    # issue 27's acceptance on a CPU: ResNet-50 at batch 2, 224; GPT-2 with 4 layers, width 256, sequence 256
    "cpu-parity": {"resnet50": dict(kw={}, shape=(3, 224, 224), batch=2),
                   "gpt2": dict(kw=dict(n_layer=4, n_embd=256, n_head=4, n_ctx=256, dropout=0.1), shape=(256,),
                                batch=4)},
    # networks the executor and its time model were never tuned on (issue 27's targets checked off-tune):
    # steps of 0.1-0.25 s on one CPU core
    "cpu-unseen": {"densenet121": dict(kw={}, shape=(3, 64, 64), batch=2),
                   "inception_v3": dict(kw={}, shape=(3, 96, 96), batch=2),
                   "transformer": dict(kw={}, shape=(128,), batch=2),
                   "llama": dict(kw=dict(vocab=8000, n_ctx=256, n_layer=4, d_model=256, n_head=4), shape=(256,),
                                 batch=2)},
    # the multi-branch networks cut where several tensors cross (--cuts auto takes multi for them):
    # resident tensors, some of which no backward saves (NASNet-A's cell outputs)
    "cpu-multi": {"nasnet_a": dict(kw={}, shape=(3, 32, 32), batch=2),
                  "unet": dict(kw={}, shape=(3, 64, 64), batch=2)},
    # tiny multi-tensor chains (10-25 ms steps, resident tensors), where recompute-all had run 14-22%
    # faster than predicted here (20-34% in session 36's probe by memplan run): the turn model's no-grad times
    "cpu-tiny-multi": {"llama": dict(kw=dict(vocab=8000, n_ctx=64, n_layer=2, d_model=96, n_head=4), shape=(64,),
                                     batch=2),
                       "transformer": dict(kw=dict(vocab=8000, src_len=32, n_ctx=64, d_model=64, n_head=4, d_ff=256,
                                                   n_enc=2, n_dec=2), shape=(64,), batch=2)},
    "paper": {"resnet50": dict(kw={}, shape=(3, 224, 224), batch=32),
              "resnet101": dict(kw={}, shape=(3, 224, 224), batch=32),
              "gpt2": dict(kw={}, shape=(1024,), batch=8)},
}
CASES = PRESETS["small"]
#: --memory-method: the ``memory_method`` column of a CPU run (models.memory.memory_tracker's methods)
MEMORY_METHOD_NAMES = {"dispatch": "dispatch-mode tracker (tensors' storages)",
                       "profiler": "c10 CPU allocator events (models.memory.ProfilerTracker)"}
_RETIME = "__stages_in_context__"          # the contender that re-times the stages during time_all
_RETIME_TURNS = "__turns_in_context__"     # models.remat.turn_ops with per-operation timers (no-grad forwards)
_TURNS = "__turns__"                       # the same sequence untimed (the turn cost)
METHODS = ["rotor", "rotor-floating", "sequential", "store-all"]

COLUMNS = ["device", "gpu", "torch", "cuda", "cudnn", "driver", "deterministic", "date", "clock", "memory_method",
           "autocast", "fused_backward",
           "network", "batch", "input", "cuts", "holds", "L", "fraction", "memory_limit", "method", "status", "message",
           "ops", "recomputations", "same_as", "grads_equal", "grads_max_rel_diff",
           "predicted_peak", "measured_peak", "peak_rel_err", "within_limit", "timed_peak", "held_stages",
           "predicted_time", "predicted_time_profile", "measured_time", "time_rel_err", "time_min", "time_max",
           "time_q10", "time_rel_err_q10",
           "time_low", "time_high",
           "repeats", "noisy", "vs_autograd", "vs_autograd_low", "vs_autograd_high",
           "throughput", "predicted_throughput", "solve_seconds", "steps_per_sample", "cuda_segments_after_round_1"]
THROUGHPUT_COLUMNS = ["device", "gpu", "clock", "memory_method", "autocast", "network", "batch", "input", "cuts", "holds", "L", "strategy", "segments", "memory_limit",
                      "status", "grads_equal", "grads_max_rel_diff", "predicted_peak", "measured_peak", "predicted_time",
                      "predicted_time_profile", "measured_time", "time_low", "time_high", "rounds", "noisy", "throughput", "rotor_gain",
                      "gain_vs_checkpoint_sequential", "vs_checkpoint_sequential", "vs_checkpoint_sequential_low",
                      "vs_checkpoint_sequential_high", "not_slower_than_checkpoint_sequential"]


# ------------------------------------------------------------------------------------------ set-up
def set_deterministic(device: str, warn_only: bool = False) -> str:
    """Deterministic kernels (CUDA: cuBLAS needs its workspace configured before its first call).
    Returns the text of the ``deterministic`` column."""
    import torch

    if not device.startswith("cuda"):
        return "cpu kernels"
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    torch.backends.cudnn.benchmark = False
    det = getattr(torch.utils, "deterministic", None)
    if det is not None and hasattr(det, "fill_uninitialized_memory"):
        # every tensor the networks allocate is written before it is read: filling them with NaN (the
        # default under deterministic mode) would only add kernels to the times measured
        det.fill_uninitialized_memory = False
    return "warn_only" if warn_only else "on"


def environment(device: str) -> dict[str, Any]:
    """The device columns (empty GPU fields on a CPU: nothing is made up)."""
    import datetime as dt

    import torch

    from memplan.models.profiler import device_info

    info = device_info(device)
    cuda = device.startswith("cuda")
    return {"device": f"{device} ({info['gpu']})" if cuda else f"cpu ({info.get('cpu', '')})",
            "gpu": info.get("gpu", "") if cuda else "", "torch": torch.__version__,
            "cuda": info.get("cuda", "") if cuda else "", "cudnn": info.get("cudnn", "") if cuda else "",
            "driver": (info.get("driver") or "unknown") if cuda else "",
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


class Case:
    """One network on one device: the model, its linearized stages, the profiled chain, autograd's
    reference gradients; :meth:`execute` runs a sequence and compares."""

    def __init__(self, name: str, spec: dict, device: str, repeats: int, profile_repeats: int | None = None,
                 clock: str = "wall", memory: str = "profiler", cuts: str = "auto", free_backward: bool = False,
                 autocast: str | None = None):
        import torch

        from memplan.models.graph import linearize_model
        from memplan.models.networks import example_input, get_model
        from memplan.models.profiler import classification_loss, profile_chain

        from memplan.models.measure import clock as pick_clock

        self.name, self.spec, self.device, self.repeats = name, spec, device, repeats
        self.autocast = autocast           # mixed precision: every contender's forward under torch.autocast
        # how peaks are measured on a CPU (models.memory.memory_tracker; CUDA: the allocator's statistics)
        self.memory = "dispatch" if device.startswith("cuda") else memory
        self.clock = pick_clock(clock, torch.get_num_threads()) if not device.startswith("cuda") else time.perf_counter
        self.batch = int(spec["batch"])
        torch.manual_seed(0)
        model = get_model(name, **spec["kw"]).to(device).train()
        self.x = example_input(name, self.batch, spec["shape"], vocab=spec["kw"].get("vocab"), device=device)
        self.loss_fn = classification_loss()
        ref = copy.deepcopy(model)
        torch.manual_seed(7)
        with self.amp():
            out = self.loss_fn(ref(self.x))
        out.backward()
        del out
        self.grads = {n: p.grad for n, p in ref.named_parameters()}
        del ref
        self.model = model                       # its parameters are shared with the stages
        # ``cuts``: by default the rule of 'memplan profile' (auto: where several tensors cross only for
        # networks whose single-tensor stages are too coarse, the Transformer's 4 among them; the
        # ResNets, DenseNets, Inception and GPT-2 are cut as before); "saved" for single-tensor cuts only
        with self.amp():          # the cuts where autograd keeps the tensor, as it does under autocast
            lm = linearize_model(model, self.x, self.loss_fn, cuts=cuts)
        self.memory_note = ""
        self.cut_rule = "saved" if lm.residency is None else "multi"      # the rule taken (auto decides)
        if lm.residency is not None and self.memory == "profiler":
            # this network's contenders are all measured by the dispatch tracker, as its recorded rows
            # were (c10's events size multi-tensor cuts too since session 40: memplan profile
            # --memory-method profiler), its rows say so
            self.memory = "dispatch"
            self.memory_note = f" (multi-tensor cuts: {MEMORY_METHOD_NAMES['dispatch']} for all its contenders)"
        self.stages = lm.stages
        self.loss_stage = lm.loss_stage(self.loss_fn)      # stage L+1 (a folded head, then the loss)
        with self.amp():
            self.chain = profile_chain(lm.stages, self.x, self.loss_stage, repeats=profile_repeats or repeats,
                                       device=device, names=lm.names, name=f"{name}-b{self.batch}",
                                       loss_name=lm.loss_name, clock=clock if not device.startswith("cuda") else "wall",
                                       turns=True, memory=self.memory, free_backward=free_backward)
        self.held_chain = self.chain             # paper 004's: what the held run of the traces follows
        self.free_record = free_backward and bool(self.chain.provenance.get("free_backward"))
        if free_backward:
            # every solver plans the executor without its holds (models.remat.free_backward_chain): B^l's
            # overheads those of the free replay, which predicts each run (Case.predict)
            from memplan.models.remat import free_backward_chain

            self.chain = free_backward_chain(self.chain)
        self.params = list(model.named_parameters())
        self._cache: dict[tuple, tuple[str, dict]] = {}
        self._contenders: dict[str, tuple] = {}  # tag -> (run once, its measurement dict), timed by time_all
        self.target, self.max_rounds, self.time_budget = 0.02, max(repeats, 40), None
        self.fuse = True                         # models.runtime.execute's fuse_backward
        self.holds = "peak"                      # timed runs hold a fused group's a^j, delta^j at the peak only
        self.steps = 1                           # steps per timed sample (set_steps_per_sample)
        self.timed_chain = None                  # the chain re-timed during time_all (same rounds as the runs)
        self.traces: list[dict] = []            # per-operation memory, measured and simulated

    # -- helpers -----------------------------------------------------------------------------------
    def amp(self):
        """A fresh ``torch.autocast`` block of ``autocast``'s dtype on the case's device (each step its own,
        as a training loop's: :func:`memplan.models.runtime.autocast_blocks`), or nothing."""
        from memplan.models.runtime import autocast_blocks

        return autocast_blocks(self.autocast, self.device)()

    def _exec(self, *args, **kw):
        """:func:`memplan.models.runtime.execute` inside :meth:`amp` (it runs its backward calls with
        autocast off, as ``loss.backward()`` after the block)."""
        from memplan.models.runtime import execute

        with self.amp():
            return execute(*args, **kw)

    def _clear_grads(self) -> None:
        for _, p in self.params:
            p.grad = None

    def _grads_diff(self) -> float:
        """:func:`models.runtime.grads_max_rel_diff` of the parameters' gradients against plain
        autograd's (0.0: bit-identical; inf: a gradient missing; a parameter shared by three stages or
        more whose B's run in separate calls: its contributions summed in another order, 4e-8 on the
        Transformer's tied embedding)."""
        from memplan.models.runtime import grads_max_rel_diff

        return grads_max_rel_diff([p.grad for _, p in self.params], [self.grads[n] for n, _ in self.params])

    def _grads(self) -> dict:
        d = self._grads_diff()
        return {"grads_equal": d == 0.0, "grads_max_rel_diff": d}

    def set_steps_per_sample(self, steps: int | None) -> int:
        """Steps run back to back between the two synchronizes of one timed sample (the sample is
        their mean). ``None``: 1 on a CPU; on CUDA enough for 0.1 s by the profiled store-all time, 10
        at most. On an H100 one ResNet-50 step of 20 ms spread 14% (5th to 95th percentile) timed alone,
        1.5% as the mean of 5 (``benchmarks/results/timing_noise_gpu.csv``): the CPU queues such a
        step in 70% of its GPU time, so the CPU's jitter starves the GPU, and a synchronize per step adds
        its own; back to back, as training runs, the GPU stays fed. Returns the number chosen."""
        from memplan.models.measure import steps_per_sample

        if steps is None:
            steps = (steps_per_sample(float(self.chain.uf.sum() + self.chain.ub.sum()))
                     if self.device.startswith("cuda") else 1)
        self.steps = int(steps)
        return self.steps

    def _timed(self, fn, m: dict, tag: str) -> None:
        """Register ``fn`` as a contender of :meth:`time_all`, which fills ``m``'s timing keys: one
        sample is the mean of ``self.steps`` runs between two synchronizes, the gradients cleared
        before the first (later runs accumulate into them, as training steps do)."""
        from memplan.models.measure import mean_of_steps

        m["times"] = []
        once = mean_of_steps(fn, self.steps, sync=lambda: _sync(self.device), clock=self.clock, before=self._clear_grads)
        if self.device.startswith("cuda"):
            once = _counting_segments(once, self.device, m.setdefault("cuda_segments", []))
        self._contenders[tag] = (once, m)

    def time_all(self, progress=print) -> None:
        """Time every registered run (plans, store-all, autograd, checkpoint_sequential) in alternation,
        until each median's 95% interval is within ``self.target`` (``models.measure.interleaved``),
        at least ``self.repeats`` rounds (``self.max_rounds`` at most); fills ``times``, ``time_low``,
        ``time_high``, ``rounds`` and ``noisy`` of each measurement."""
        import torch

        from memplan.models.measure import interleaved
        from memplan.models.runtime import store_all_ops, turn_ops

        per_op: list[list[float]] = []
        per_op_turn: list[list[float]] = []
        turn_seq = turn_ops(self.chain.L)

        def retime(ops, out) -> None:
            """One run of ``ops`` with per-operation timers: the stages re-timed in context, in the
            same rounds as the runs they predict."""
            times: list[float] = []
            self._exec(self.stages, self.loss_stage, self.x, ops, device=self.device, op_times=times,
                    clock=self.clock, fuse_backward=self.fuse)
            out.append(times)

        turn_hold = self._holds(turn_seq, simulate_remat(self.chain, turn_seq).memory_during)

        def turn_run() -> None:
            torch.manual_seed(7)
            self._exec(self.stages, self.loss_stage, self.x, turn_seq, device=self.device, fuse_backward=self.fuse,
                    sync=False, hold=turn_hold)

        self._timed(partial(retime, store_all_ops(self.chain.L), per_op), {}, _RETIME)
        self._timed(partial(retime, turn_seq, per_op_turn), {}, _RETIME_TURNS)
        self._timed(turn_run, {}, _TURNS)
        runs = {tag: once for tag, (once, _) in self._contenders.items()}
        res = interleaved(runs, target=self.target, min_rounds=max(2, self.repeats), max_rounds=self.max_rounds,
                          budget=self.time_budget, progress=lambda line: progress(f"{self.name}: {line}"))
        sa = self._cache.get(tuple(store_all_schedule(self.chain).ops))
        if per_op and sa is not None and sa[0] in res:
            from memplan.models.runtime import InContextTimes

            ic = InContextTimes.from_runs(per_op, res[sa[0]].times, self.chain.L)
            uf, ub, factor = ic.calibrated()
            uf_ng, u_turn = ic.turn_model(per_op_turn, res[_TURNS].times)
            self.timed_chain = dataclasses.replace(self.chain, uf=uf, ub=ub, uf_ng=uf_ng, u_turn=u_turn, provenance={
                **self.chain.provenance, "retimed": f"in context during runtime_check's timing rounds "
                                                    f"({ic.runs} runs), scaled by {factor:.4f}; no-grad forward "
                                                    f"times and a turn cost of {u_turn * 1e6:.1f} us from "
                                                    f"{len(per_op_turn)} runs of models.remat.turn_ops"})
            ratio = sum(uf_ng[1:-1]) / sum(uf[1:-1]) if sum(uf[1:-1]) > 0 else 1.0
            # the turn cost at the ends of the 95% interval of turn_ops' median run: how much it can be trusted
            t = res[_TURNS]
            span = ""
            if t.low is not None and t.high is not None and math.isfinite(t.low) and math.isfinite(t.high):
                lo_t, hi_t = (ic.turn_model(per_op_turn, [v])[1] for v in (t.low, t.high))
                span = f" [{lo_t * 1e6:.0f}, {hi_t * 1e6:.0f}]"
            progress(f"{self.name}: time model re-timed in the rounds: no-grad forwards {ratio:.3f} x F_all's, "
                     f"a turn {u_turn * 1e6:.0f} us{span} (95% interval of turn_ops' median run)")
        for tag, (_, m) in self._contenders.items():
            t = res[tag]
            m.update(times=t.times, time_low=t.low, time_high=t.high, rounds=len(t.times), noisy=t.noisy,
                     time_rel_halfwidth=t.rel_halfwidth)

    def _holds(self, ops, during, replay: bool = False):
        """``execute``'s ``hold`` for the timed runs of ``ops``: with ``holds`` "peak" (the default) the
        stages whose B is at the peak of ``during`` (a held measured run's memory per operation:
        :func:`models.runtime.holds_at_peak`; with ``replay``, the replay's, every B within 1% of its
        peak: :func:`models.runtime.holds_at_replay_peak`): the run's peak is the held run's and it
        pays two hooks per held B instead of one per junction of every fused group (``timed_peak``
        measures it); "all": every B held."""
        from memplan.models.runtime import holds_at_peak, holds_at_replay_peak

        if self.holds == "none":
            return False
        if self.holds != "peak":
            return True
        return (holds_at_replay_peak if replay else holds_at_peak)(ops, during, device=self.device)

    def predict(self, seq):
        """The replay the executed run is compared with: paper 004's (what the executor with its holds
        follows), or with ``holds`` "none" the replay of the executor without holds
        (:func:`models.remat.free_backward_model`; a chain without the record: paper 004's)."""
        from memplan.models.remat import free_backward_model

        if self.holds == "none":
            return simulate_remat(self.chain, seq, **free_backward_model(self.chain))
        return simulate_remat(self.chain, seq)

    def _tracked(self, fn) -> float:
        """Peak bytes of ``fn()`` above what existed before (:func:`models.memory.step_peak`)."""
        from memplan.models.memory import step_peak

        return step_peak(fn, [p for _, p in self.params], self.device, self.memory)

    # -- runs --------------------------------------------------------------------------------------
    def execute(self, seq, tag: str) -> tuple[str, dict]:
        """(the tag of the first identical sequence, measurements) for a memplan sequence."""
        import torch

        from memplan.models.runtime import free_holds

        key = tuple(seq.ops)
        if key in self._cache:
            got = self._cache[key]
            if tag != got[0]:
                got[1].setdefault("also", []).append(tag)     # timed once, under the first tag
            return got
        self._clear_grads()
        torch.manual_seed(7)
        _sync(self.device)
        res = self._exec(self.stages, self.loss_stage, self.x, seq, measure_memory=True, device=self.device,
                      fuse_backward=self.fuse)
        grads = self._grads()
        sim = self.predict(seq)
        if self.holds == "none":
            # autograd's own freeing: no holds, the peak of a run so, compared with the free replay
            def free():
                torch.manual_seed(7)
                self._exec(self.stages, self.loss_stage, self.x, seq, device=self.device, fuse_backward=self.fuse,
                        hold=free_holds(seq.ops, sim.memory_during))

            peak = self._tracked(free)
            hold = free_holds(seq.ops, sim.memory_during)   # timed free, the loss's scalars let go where needed
        elif self.memory == "dispatch":
            peak = float(res.peak_memory)
            hold = self._holds(seq.ops, res.memory_peak_during)
        else:
            # c10's events: the fully held run's peak, measured as every contender's is; the per-operation
            # memory (res, the dispatch tracker's) misses the kernels' scratch, so the holds come from the
            # replay of the chain profiled with the same events, every B within 1% of its peak
            def held():
                torch.manual_seed(7)
                self._exec(self.stages, self.loss_stage, self.x, seq, device=self.device, fuse_backward=self.fuse)

            peak = self._tracked(held)
            hold = self._holds(seq.ops, sim.memory_during, replay=True)

        def run():
            torch.manual_seed(7)
            self._exec(self.stages, self.loss_stage, self.x, seq, device=self.device, fuse_backward=self.fuse,
                    sync=False, hold=hold)   # queued as autograd's step is: the sample's synchronizes bound it

        # the timed configuration's own peak, measured as autograd's is (step_peak): the held run's where
        # the holds at its peak work as they should
        m = {**grads, "measured_peak": peak, "timed_peak": self._tracked(run),
             "held_stages": "all" if hold is True else "none" if hold is False or getattr(hold, "free", False) else " ".join(map(str, sorted(hold)))}
        self._timed(run, m, tag)
        out = (tag, m)
        self._cache[key] = out
        # the per-operation trace is the fully held run's (measure_memory): paper 004's replay is its
        # prediction, also with --holds none (whose rows compare the free run with the free replay)
        tsim = sim if self.holds != "none" else simulate_remat(self.held_chain, seq)
        self.traces.append({"network": self.name, "sequence": tag, "ops": [list(o) for o in key],
                            "measured_after": res.memory_after, "measured_during": res.memory_peak_during,
                            "simulated_after": tsim.memory_after, "simulated_during": tsim.memory_during})
        return out

    def _input_copy(self):
        from memplan.models.memory import grad_input

        return grad_input(self.x)

    def autograd(self) -> dict:
        """Plain ``loss_fn(model(x)).backward()`` on the unsplit model (paper 004's "PyTorch")."""
        import torch

        def run():
            torch.manual_seed(7)
            with self.amp():
                out = self.loss_fn(self.model(self._input_copy()))
            out.backward()

        if "autograd" in self._cache:
            return self._cache["autograd"][1]
        self._clear_grads()
        peak = self._tracked(run)
        m = {**self._grads(), "measured_peak": peak}
        self._timed(run, m, "autograd")
        self._cache["autograd"] = ("autograd", m)
        return m

    def checkpoint_sequential(self, segments: int) -> dict | None:
        """``torch.utils.checkpoint.checkpoint_sequential`` itself: reentrant, as memplan's
        sequential_schedule models it, where the input is a float tensor; non-reentrant where it is
        not (token ids cannot require grad, and the reentrant checkpoint of the first segment would
        then give no gradients; the non-reentrant one recomputes each segment when the backward first
        needs one of its saved tensors, with the same segments). ``None`` for stages cut where several
        tensors cross (``cuts="multi"``): ``checkpoint_sequential`` chains one tensor from module to
        module, so it cannot run them."""
        import torch
        from torch.utils.checkpoint import checkpoint_sequential

        if any(hasattr(st, "resident_in") for st in self.stages):
            return None     # stages that pass several tensors: no nn.Sequential of them for torch to checkpoint
        reentrant = self.x.is_floating_point()
        seqmod = torch.nn.Sequential(*self.stages)

        def run():
            torch.manual_seed(7)
            with self.amp():
                out = self.loss_stage(checkpoint_sequential(seqmod, segments, self._input_copy(),
                                                            use_reentrant=reentrant))
            out.backward()

        self._clear_grads()
        peak = self._tracked(run)
        m = {**self._grads(), "measured_peak": peak}
        self._timed(run, m, f"checkpoint_sequential:{segments}")
        return m


def _counting_segments(once, device: str, out: list):
    """``once`` (a timed sample) that also appends how many segments the CUDA caching allocator newly
    obtained from the driver (``cudaMalloc``, which synchronizes) during the sample: once the first
    round has run, each contender's blocks should be cached and this 0; a sample that still grows the
    cache pays a driver call inside its timing (a diagnosis of the GPU rows' spread)."""
    import torch

    def counted() -> float:
        before = torch.cuda.memory_stats(device).get("segment.all.allocated", 0)
        t = once()
        out.append(int(torch.cuda.memory_stats(device).get("segment.all.allocated", 0) - before))
        return t
    return counted


def _rel(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b - 1


def _case_env(case: Case) -> dict:
    """A network's own columns: ``cuts``, the cut rule its linearization took (``saved``: one tensor
    per cut; ``multi``: several), and its memory method where it could not use the one asked for (a
    multi-tensor cut network on c10's events); ``holds``, how its runs held (``--holds``; auto resolved:
    none where the profile has the free record, else peak)."""
    return {"cuts": case.cut_rule, "holds": case.holds,
            **({"memory_method": MEMORY_METHOD_NAMES[case.memory]} if case.memory_note else {}),
            **({"autocast": case.autocast} if getattr(case, "autocast", None) else {})}


def _row(env: dict, case: Case, det: str, fraction: float, limit: float, method: str, status: str, *,
         message: str = "", seq=None, same_as: str = "", m: dict | None = None, solve_s: float | None = None,
         is_plan: bool = True) -> dict:
    """A CSV row; ``is_plan``: the sequence was solved for ``limit`` (``within_limit`` is judged), else
    ``limit`` is only the store-all peak it runs at (store-all and autograd at fraction 1)."""
    c = case.chain
    row = {**env, **_case_env(case), "deterministic": det, "fused_backward": case.fuse, "network": case.name,
           "batch": case.batch,
           "input": "x".join(map(str, case.spec["shape"])), "L": c.L, "fraction": fraction, "memory_limit": limit,
           "method": method, "status": status, "message": message[:200], "same_as": same_as,
           "solve_seconds": solve_s, "repeats": case.repeats, "steps_per_sample": case.steps}
    tc = case.timed_chain
    if seq is not None or method == "autograd":
        s = seq if seq is not None else store_all_schedule(c)
        sim = case.predict(s)
        t_pred = simulate_remat(tc, s).makespan if tc is not None else sim.makespan
        row.update(predicted_peak=sim.peak_memory, predicted_time=t_pred, predicted_time_profile=sim.makespan,
                   predicted_throughput=case.batch / t_pred if t_pred else None)
        if seq is not None:
            row.update(ops=len(seq), recomputations=seq.count("F_ck") + seq.count("F_none"))
    if m is not None:
        t = statistics.median(m["times"])
        row.update(grads_equal=m["grads_equal"], grads_max_rel_diff=m.get("grads_max_rel_diff"),
                   measured_peak=m["measured_peak"], measured_time=t,
                   timed_peak=m.get("timed_peak", m["measured_peak"]), held_stages=m.get("held_stages"),
                   time_min=min(m["times"]), time_max=max(m["times"]), throughput=case.batch / t,
                   time_low=m.get("time_low"), time_high=m.get("time_high"), repeats=len(m["times"]),
                   noisy=m.get("noisy"),
                   within_limit=(m["measured_peak"] <= limit) if is_plan else None,
                   cuda_segments_after_round_1=sum(m["cuda_segments"][1:]) if m.get("cuda_segments") else None)
        row["peak_rel_err"] = _rel(m["measured_peak"], row.get("predicted_peak"))
        row["time_rel_err"] = _rel(t, row.get("predicted_time"))
        ts = sorted(m["times"])
        row["time_q10"] = ts[len(ts) // 10]           # the undisturbed step: what a slow sample does not move
        row["time_rel_err_q10"] = _rel(row["time_q10"], row.get("predicted_time"))
        ag = case._cache.get("autograd")
        if method != "autograd" and ag is not None and ag[1].get("times"):
            r = paired_ratio(m["times"], ag[1]["times"])
            row.update(vs_autograd=r.median, vs_autograd_low=r.low, vs_autograd_high=r.high)
    return row


# ------------------------------------------------------------------------------------------ the check
def solve(chain, limit: float, method: str, slots: int | None, time_limit: float):
    """:func:`memplan.remat.solve` with ``slots`` memory slots (None: the DP chooses and refines them,
    the solver's default); where a given number of slots would need DP tables beyond the solver's cap
    (rotor-floating on long chains), the DP chooses instead and the note says so. Returns
    (solution, note)."""
    try:
        return remat.solve(chain, memory=limit, method=method, time_limit=time_limit, slots=slots), ""
    except InputError as e:
        if slots is None or "tables" not in str(e):
            raise
    sol = remat.solve(chain, memory=limit, method=method, time_limit=time_limit, slots=None)
    return sol, f"{slots} slots need too large DP tables; the DP chose {sol.details.get('slots')} slots"


def _solve_job(job: tuple) -> tuple:
    """One solve (run in a worker process): (solution or None, note, error, seconds)."""
    chain, limit, method, slots, time_limit = job
    t0 = time.perf_counter()
    try:
        sol, note = solve(chain, limit, method, slots, time_limit)
        return sol, note, "", time.perf_counter() - t0
    except InputError as e:
        return None, "", str(e), time.perf_counter() - t0


def solve_all(jobs: dict, workers: int = 1) -> dict:
    """``{key: (chain, limit, method, slots, time_limit)}`` -> ``{key: (solution, note, error, seconds)}``.
    With ``workers`` > 1 the solves run in that many spawned processes (the DPs are CPU work; the GPU
    machine has 16 cores and the GPU would otherwise wait)."""
    if workers <= 1 or len(jobs) <= 1:
        return {k: _solve_job(j) for k, j in jobs.items()}
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)),
                             mp_context=multiprocessing.get_context("spawn")) as ex:
        futures = {k: ex.submit(_solve_job, j) for k, j in jobs.items()}
        return {k: f.result() for k, f in futures.items()}


def plan(chain, fractions: list[float], methods: list[str], segments: list[int] | None, slots: int | None,
         time_limit: float, workers: int = 1, predict=None) -> dict:
    """Every solve of :func:`check_case` (keys ``(fraction, method)``) and of :func:`throughput_case`
    (keys ``("rotor@sequential", s)``, at the simulated peak of ``s`` segments: ``predict``'s replay,
    :meth:`Case.predict`, default paper 004's), in one batch. The solvers plan in ``chain``: paper
    004's model, or with ``--holds none`` the free replay's (:func:`memplan.models.remat.free_backward_chain`)."""
    lo, hi = remat.memory_range(chain)
    jobs = {(f, m): (chain, lo + f * (hi - lo), m, slots, time_limit) for f in fractions for m in methods}
    replay = predict or (lambda seq: simulate_remat(chain, seq))
    for s in segments or []:
        limit = replay(sequential_schedule(chain, s)).peak_memory
        jobs[("rotor@sequential", s)] = (chain, limit, "rotor", slots, time_limit)
    return solve_all(jobs, workers)


def check_case(case: Case, env: dict, det: str, fractions: list[float], methods: list[str],
               solved: dict) -> list:
    """One row per (limit, method) (solutions from :func:`plan`), plus store-all and autograd at the
    store-all peak (fraction 1). Executes every sequence (memory, gradients) and registers its timing
    with the case; returns row builders to call after :meth:`Case.time_all`."""
    lo, hi = remat.memory_range(case.chain)
    rows: list = []
    for f in fractions:
        limit = lo + f * (hi - lo)
        for method in methods:
            sol, note, error, solve_s = solved[(f, method)]
            if sol is None:                   # this method does not run here: the row says why
                rows.append(partial(_row, env, case, det, f, limit, method, "not run", message=error, solve_s=solve_s))
                continue
            if not sol.success:
                rows.append(partial(_row, env, case, det, f, limit, method, str(sol.status), message=sol.message,
                                    solve_s=solve_s))
                continue
            same, m = case.execute(sol.schedule, f"{method}@{f:g}")
            rows.append(partial(_row, env, case, det, f, limit, method, str(sol.status), seq=sol.schedule, m=m,
                                message=note, same_as="" if same == f"{method}@{f:g}" else same, solve_s=solve_s))
    seq = store_all_schedule(case.chain)
    same, m = case.execute(seq, "store-all@1")
    rows.append(partial(_row, env, case, det, 1.0, hi, "store-all", "executed", seq=seq, m=m, is_plan=False,
                        same_as="" if same == "store-all@1" else same))
    rows.append(partial(_row, env, case, det, 1.0, hi, "autograd", "executed", m=case.autograd(), is_plan=False,
                        message="plain loss.backward() on the unsplit model; predicted = store-all"))
    return rows


def _line(r: dict) -> str:
    pe, te = r.get("peak_rel_err"), r.get("time_rel_err")
    return (f"  {r['network']:10s} f={r['fraction']:<5g} {r['method']:15s} grads "
            f"{_grads_text(r)}  peak {fmt_memory(r['measured_peak'])} vs "
            f"{fmt_memory(r['predicted_peak'])} ({(pe or 0) * 100:+.1f}%)  time {r['measured_time'] * 1e3:.2f} ms vs "
            f"{r['predicted_time'] * 1e3:.2f} ms ({(te or 0) * 100:+.1f}%)  {r['throughput']:.2f}/s")


def grads_ok(r: dict) -> bool:
    """A row's gradients are autograd's: bit-identical, or within
    :data:`memplan.models.runtime.GRAD_REL_TOL` (rows written before the column existed: bit-identical
    only)."""
    from memplan.models.runtime import GRAD_REL_TOL

    if r.get("grads_equal"):
        return True
    d = r.get("grads_max_rel_diff")
    return d is not None and d == d and d <= GRAD_REL_TOL


def _grads_text(r: dict) -> str:
    if r.get("grads_equal"):
        return "equal"
    return f"~{r['grads_max_rel_diff']:.0e}" if grads_ok(r) else "DIFFER"


def segment_counts(L: int, count: int = 10) -> list[int]:
    """Paper 004, section 5.4: ``count`` numbers of segments from 2 to 2 sqrt(L) (at most L)."""
    top = max(2, min(L, int(round(2 * math.sqrt(L)))))
    if L < 2:
        return [1]
    return sorted({min(L, max(2, int(round(2 + i * (top - 2) / max(1, count - 1))))) for i in range(count)})


#: issue 27's target for a predicted peak: within 1% of the measured one
PEAK_TARGET = 0.01


def throughput_case(case: Case, env: dict, segments: list[int], solved: dict, slots: int | None = None,
                    time_limit: float = 30.0) -> list:
    """Paper 004's comparison: sequential (memplan's sequence and torch's checkpoint_sequential),
    rotor at the memory each sequential point needs (solutions from :func:`plan`), store-all.
    Where PyTorch's ``checkpoint_sequential`` measures below the peak the chain predicts for the same
    segments, rotor is solved again at PyTorch's measured peak (its row's ``memory_limit``): the chain
    (and the executor, which holds what it says) keeps delta^l and a^l until B^l ends, as paper 004's
    model has it, while autograd frees them inside B^l once its first operations have used them;
    where a plan peaks in such a B (DenseNet-121 at 64x64 with 5 and 6 segments: B^10, a batch norm
    and ReLU stage) ``checkpoint_sequential`` peaked 6-8% below the chain's sequential(k)
    (``executor_parity_cpu_unseen``; the executor without its holds, 4% below the chain). The
    comparison is then made at the memory PyTorch really used. Only beyond :data:`PEAK_TARGET` (1%,
    what a prediction is held to): closer, the two are the same memory within the model's accuracy, and
    a limit a few kilobytes lower (Inception v3: 11 KB, 0.06%) would only deny rotor the very sequence
    ``checkpoint_sequential`` runs.
    Returns row builders to call after :meth:`Case.time_all` (as :func:`check_case`).

    Every comparison is paired round by round (:func:`memplan.models.measure.paired_ratio`: the
    median of the per-round time ratios and its 95% interval). ``vs_checkpoint_sequential`` (with
    ``_low``/``_high``) is this row's time over PyTorch's ``checkpoint_sequential``'s with the same
    segments (memplan's ``sequential`` rows and rotor's); ``gain_vs_checkpoint_sequential`` = 1 / that
    - 1; ``rotor_gain`` the same over memplan's sequential sequence; and
    ``not_slower_than_checkpoint_sequential`` says that rotor is not shown slower: the interval's low
    end is at most 1. (Before 2026-11-27 these compared the two medians and their separate intervals,
    which a slow round widens for both.)"""
    c = case.chain
    base = {**env, **_case_env(case), "network": case.name, "batch": case.batch,
            "input": "x".join(map(str, case.spec["shape"])), "L": c.L}

    def row(strategy, s, limit, seq, m, status="executed", seq_m=None, ck_m=None):
        sim = case.predict(seq) if seq is not None else None
        t = statistics.median(m["times"]) if m else None
        r = {**base, "strategy": strategy, "segments": s, "memory_limit": limit, "status": status,
             "grads_equal": m["grads_equal"] if m else None,
             "grads_max_rel_diff": m.get("grads_max_rel_diff") if m else None,
             "predicted_peak": sim.peak_memory if sim else None,
             "measured_peak": m["measured_peak"] if m else None,
             "predicted_time": (simulate_remat(case.timed_chain, seq).makespan if sim and case.timed_chain is not None
                                else sim.makespan if sim else None),
             "predicted_time_profile": sim.makespan if sim else None, "measured_time": t,
             "time_low": m.get("time_low") if m else None, "time_high": m.get("time_high") if m else None,
             "rounds": m.get("rounds") if m else None, "noisy": m.get("noisy") if m else None,
             "throughput": case.batch / t if t else None}
        if m and seq_m:
            r["rotor_gain"] = 1 / paired_ratio(m["times"], seq_m["times"]).median - 1
        if m and ck_m and m is not ck_m:
            p = paired_ratio(m["times"], ck_m["times"])
            r.update(vs_checkpoint_sequential=p.median, vs_checkpoint_sequential_low=p.low,
                     vs_checkpoint_sequential_high=p.high, gain_vs_checkpoint_sequential=1 / p.median - 1)
            if strategy == "rotor":
                r["not_slower_than_checkpoint_sequential"] = not p.shown_slower
        return r

    rows: list = []
    seq = store_all_schedule(c)
    rows.append(partial(row, "store-all", None, case.predict(seq).peak_memory, seq,
                        case.execute(seq, "store-all@1")[1]))
    for s in segments:
        seq = sequential_schedule(c, s)
        limit = case.predict(seq).peak_memory
        seq_m = case.execute(seq, f"sequential:{s}")[1]
        ck = case.checkpoint_sequential(s)
        rows.append(partial(row, "sequential", s, limit, seq, seq_m, ck_m=ck))
        if ck is not None:
            rows.append(partial(row, "checkpoint_sequential", s, limit, seq, ck))
        sol = solved[("rotor@sequential", s)][0]
        if ck is not None and ck["measured_peak"] < limit * (1 - PEAK_TARGET):
            limit = float(ck["measured_peak"])          # PyTorch's point: rotor at the memory it used
            sol = _solve_job((c, limit, "rotor", slots, time_limit))[0]
        if sol is not None and sol.success:
            m = case.execute(sol.schedule, f"rotor@sequential:{s}")[1]
            rows.append(partial(row, "rotor", s, limit, sol.schedule, m, status=str(sol.status), seq_m=seq_m,
                                ck_m=ck))
        else:
            rows.append(partial(row, "rotor", s, limit, None, None,
                                status=str(sol.status) if sol is not None else "not run"))
    return rows


def _throughput_line(r: dict) -> str:
    ck = r.get("gain_vs_checkpoint_sequential")
    return (f"  {r['network']:10s} {r['segments']:3d} segments: rotor at its memory {r['throughput']:.2f}/s, "
            f"{r['rotor_gain'] * 100:+.1f}% over memplan's sequential"
            + (f", {ck * 100:+.1f}% over checkpoint_sequential"
               f" ({'not slower' if r['not_slower_than_checkpoint_sequential'] else 'SLOWER'} within the noise)"
               if ck is not None else ""))


def throughput_summary(rows: list[dict]) -> list[str]:
    """Per network: rotor's gain at the best sequential point and on average over the segment counts."""
    lines, best_gains = [], []
    for net in dict.fromkeys(r["network"] for r in rows):
        seq = [r for r in rows if r["network"] == net and r["strategy"] == "sequential" and r["throughput"]]
        rot = {r["segments"]: r for r in rows if r["network"] == net and r["strategy"] == "rotor" and r["throughput"]}
        if not seq or not rot:
            continue
        best = max(seq, key=lambda r: r["throughput"])
        gains = [rot[r["segments"]]["rotor_gain"] for r in seq if r["segments"] in rot]
        if best["segments"] in rot:
            best_gains.append(rot[best["segments"]]["rotor_gain"])
        at_best = (f"{rot[best['segments']]['rotor_gain'] * 100:+.1f}%" if best["segments"] in rot else "n/a")
        lines.append(f"{net}: best sequential {best['segments']} segments {best['throughput']:.2f}/s; rotor at that "
                     f"memory {at_best}; mean gain over {len(gains)} segment counts "
                     f"{statistics.mean(gains) * 100:+.1f}%")
    if best_gains:
        lines.append(f"mean rotor gain at the best sequential point: {statistics.mean(best_gains) * 100:+.1f}% "
                     "(paper 004: +12.8% on average over its networks, V100)")
    return lines


def write_csv(rows: list[dict], columns: list[str], path: Path | None) -> None:
    """Rewrite ``path`` with ``rows`` (called after each network or setting, so a timeout keeps them);
    a failed write is one line ``cannot write PATH: REASON`` (:func:`cli_checks.writing`)."""
    if path is None:
        return
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)


def _is_determinism_error(e: BaseException) -> bool:
    return isinstance(e, RuntimeError) and "deterministic" in str(e)


def main(argv=None) -> int:
    p = OneLineParser(prog="python -m memplan.experiments.runtime_check", name="runtime_check",
                      description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--autocast", choices=["bfloat16", "float16"], default=None,
                   help="mixed precision: every contender's forward (and the profile) under torch.autocast with "
                        "this dtype, one block per step, the backward after it (default: none)")
    p.add_argument("--preset", choices=sorted(PRESETS), help="networks and sizes (default: cpu small, cuda "
                   "paper; --quick: quick)")
    p.add_argument("--quick", action="store_true", help="a dry run: tiny networks, one timed run, 3 segment counts")
    p.add_argument("--models", help="comma-separated networks of the preset (default: all of it)")
    p.add_argument("--fractions", default="0.25,0.5,0.75", help="memory limits between min (0) and store-all (1)")
    p.add_argument("--methods", default=",".join(METHODS), help="memplan.remat methods")
    p.add_argument("--repeats", type=positive_int, help="timed rounds at least: every sequence of a network runs "
                   "once per round, in rotating order (default 8; --quick 1)")
    p.add_argument("--max-rounds", type=positive_int, help="timed rounds at most (default 400 within --timing-budget "
                   "120 s per network; --quick: --repeats)")
    p.add_argument("--target", type=float, default=0.02, help="stop timing when the 95%% interval of every median "
                   "is within this fraction of it (default 0.02); wider rows are marked noisy")
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall", help="CPU runs: wall (time.perf_counter, "
                   "default) or cpu (time.process_time with one torch thread: steady on a shared machine); both "
                   "the profile and the runs use it")
    p.add_argument("--no-fuse-backward", dest="fuse_backward", action="store_false", help="one backward call "
                   "per B (models.runtime.execute's fuse_backward=False); the default runs each run of consecutive "
                   "B's in one call, as plain autograd")
    p.add_argument("--memory-method", choices=sorted(MEMORY_METHOD_NAMES), default=None,
                   help="CPU runs: how every peak is measured and the chain profiled: profiler (default: c10's "
                        "allocator events, every allocation, the CPU convolutions' scratch included) or dispatch "
                        "(the tensors PyTorch's dispatcher makes, not a kernel's scratch; per-operation traces "
                        "that peak at the row's measured peak)")
    p.add_argument("--cuts", choices=["auto", "saved"], default="auto",
                   help="where the networks are cut (models.graph.linearize_model): auto (default, as 'memplan "
                        "profile': several tensors per cut only where single-tensor stages are too coarse) or saved "
                        "(single-tensor cuts everywhere)")
    p.add_argument("--holds", choices=["auto", "peak", "all", "none"], default="auto", help="none: every run "
                   "without holds, as autograd frees, every method planned in the replay of that "
                   "(models.remat.free_backward_chain) and compared with it; peak: paper 004's model, the timed "
                   "runs holding a fused group's a^j and delta^j until B^j ends for the B's at the measured run's "
                   "peak (the same peak, less host time), all: for every B; auto (default since 2026-11-29): none "
                   "where the profile has the free record (single-tensor cuts, stages not compiled), else peak")
    p.add_argument("--timing-budget", type=positive_number, default=None, help="seconds of timing rounds per network "
                   "at most (default 120 when --max-rounds is not given)")
    p.add_argument("--steps-per-sample", type=positive_int, default=None, help="steps run back to back in one timed "
                   "sample, its time their mean (default: 1 on cpu; on cuda enough for 0.1 s of the profiled store-all "
                   "step, 10 at most: a short GPU step timed alone spreads with the CPU's jitter)")
    p.add_argument("--profile-repeats", type=positive_int, help="timed runs per operation when profiling (default: "
                   "--repeats)")
    p.add_argument("--time-limit", type=positive_number, default=30.0, help="seconds per solve")
    p.add_argument("--slots", type=int, default=0, help="memory slots of the DPs (default 0: the DP chooses and "
                   "refines them, memplan.remat.solve's default; paper 004 used 500)")
    p.add_argument("--workers", type=positive_int, default=None, help="processes for the solves (default: 1 on cpu, "
                   "up to 8 on cuda)")
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads (default: 1 on cpu)")
    p.add_argument("--out", default="results/runtime_check.csv", help="CSV, one row per (network, limit, method)")
    p.add_argument("--throughput", help="also run paper 004's throughput comparison into this CSV")
    p.add_argument("--segments", type=positive_int, default=None, help="numbers of segments of the comparison "
                   "(default 10; --quick 3)")
    p.add_argument("--segment-counts", help="comma-separated numbers of segments of the comparison (instead of "
                   "--segments' spread from 2 to 2 sqrt(L)); those above L are left out")
    p.add_argument("--traces", help="JSON with every contender's time in every round (seconds; 'timings', with "
                   "'also': the tags of the identical sequences timed under that one) and "
                   "the per-operation memory (measured and simulated, bytes) of every "
                   "executed sequence, to find where a prediction misses")
    p.add_argument("--budget", type=positive_number, default=None, help="seconds after which no new network is started")
    return run_script(p, _main, argv)


def _main(a: argparse.Namespace) -> int:
    import torch

    device = a.device
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise InputError(f"--device {device!r}: use cpu or cuda")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"--device {device}: no CUDA device is available to this torch ({torch.__version__}); run "
                         "on the GPU machine, or --device cpu --quick for a dry run")
    why = device_problem(device)            # cuda:N beyond this machine's devices
    if why:
        raise CliError(why)
    if a.memory_method is not None and device != "cpu":
        raise CliError(f"--memory-method {a.memory_method}: how a CPU run measures its peaks; on {device} they are "
                       "the CUDA caching allocator's statistics: leave it out")
    memory_method = a.memory_method or "profiler"
    preset = a.preset or ("quick" if a.quick else "paper" if device.startswith("cuda") else "small")
    cases = PRESETS[preset]
    names = [n for n in (a.models.split(",") if a.models else cases) if n]
    if not names:
        raise InputError(f"--models {a.models!r}: no network named; give some of {', '.join(cases)} (or leave it "
                         "out for all of them)")
    for n in names:
        if n not in cases:
            raise InputError(f"--models: {n!r} is not in preset {preset!r} ({', '.join(cases)})")
    methods = [m for m in a.methods.split(",") if m]
    for m in methods:
        if m not in remat.METHODS:
            raise InputError(f"--methods: unknown method {m!r}; choose from {', '.join(remat.METHODS)}")
    try:
        fractions = [float(f) for f in a.fractions.split(",") if f]
    except ValueError:
        raise InputError(f"--fractions {a.fractions!r}: expected numbers between 0 and 1, e.g. 0.25,0.5,0.75") from None
    if not fractions or not all(0 <= f <= 1 for f in fractions):
        raise InputError(f"--fractions {a.fractions!r}: expected numbers between 0 and 1, e.g. 0.25,0.5,0.75")
    why = repeated("--fractions", a.fractions, fractions, "distinct numbers between 0 and 1", "fraction")
    if why:                                 # 0.5,0.5 had planned and executed the same limits twice
        raise CliError(why)
    repeats = a.repeats or (1 if a.quick else 8)
    if repeats < 1:
        raise InputError(f"--repeats {repeats}: give a whole number >= 1")
    # rounds until every median's interval is within --target: short steps need hundreds (a 4 ms step's
    # CPU time varies by several % from run to run), long ones stop at the time budget
    max_rounds = a.max_rounds or (max(2, repeats) if a.quick else max(400, repeats))
    if a.timing_budget is None and not a.quick and not a.max_rounds:
        a.timing_budget = 120.0
    if max_rounds < repeats:
        raise InputError(f"--max-rounds {max_rounds}: give at least --repeats ({repeats})")
    if not 0 < a.target < 1:
        raise InputError(f"--target {a.target}: give a fraction between 0 and 1, e.g. 0.02")
    if a.threads or device == "cpu":
        torch.set_num_threads(a.threads or 1)
    if a.clock == "cpu" and (device != "cpu" or torch.get_num_threads() != 1):
        raise InputError("--clock cpu: only for --device cpu with one thread (--threads 1), where the process's CPU "
                         "time is the step's time")
    for flag, given in (("--segments", a.segments), ("--segment-counts", a.segment_counts)):
        if given is not None and not a.throughput:
            raise CliError(f"{flag}: numbers of segments of the throughput comparison, which runs only with "
                           "--throughput CSV; add it, or leave the option out")
    if a.segments is not None and a.segment_counts is not None:
        raise CliError("--segments and --segment-counts: give one of the two (--segment-counts lists the numbers, "
                       "--segments spreads that many from 2 to 2 sqrt(L))")
    n_segments = a.segments or (3 if a.quick else 10)
    try:
        explicit_segments = [int(k) for k in a.segment_counts.split(",") if k] if a.segment_counts else []
    except ValueError:
        explicit_segments = [0]
    if a.segment_counts is not None and not explicit_segments or any(k < 1 for k in explicit_segments):
        raise InputError(f"--segment-counts {a.segment_counts!r}: expected whole numbers >= 1, e.g. 2,4,6")
    if a.slots < 0:
        raise InputError(f"--slots {a.slots}: give a whole number >= 1, or 0 for the DP's own choice")
    slots = a.slots or None
    workers = a.workers if a.workers is not None else (1 if device == "cpu" else min(8, os.cpu_count() or 1))
    if workers < 1:
        raise InputError(f"--workers {workers}: give a whole number >= 1")
    # the output files, checked before the profiles (a result is never lost to a path that cannot be
    # written) and distinct (one had overwritten the other)
    outputs = {flag: output_file(path, flag) for flag, path in (("--out", a.out), ("--throughput", a.throughput),
                                                                 ("--traces", a.traces)) if path is not None}
    seen: dict[Path, str] = {}
    for flag, path in outputs.items():
        if path.resolve() in seen:
            raise CliError(f"{seen[path.resolve()]} and {flag}: both {path}; give each its own file")
        seen[path.resolve()] = flag
    out = outputs["--out"]
    thr_out = outputs.get("--throughput")
    det = set_deterministic(device)
    env = environment(device)
    env["clock"] = ("cpu (process_time, 1 thread)" if a.clock == "cpu" else "wall (perf_counter)") \
        if device == "cpu" else "wall (perf_counter around synchronized runs)"
    env["memory_method"] = (MEMORY_METHOD_NAMES[memory_method] if device == "cpu"
                            else "CUDA caching allocator statistics")
    rows: list[dict] = []
    thr_rows: list[dict] = []
    traces: list[dict] = []
    timings: list[dict] = []            # every contender's time of every round (seconds), for --traces
    t_start = time.perf_counter()
    for name in names:
        if a.budget is not None and time.perf_counter() - t_start > a.budget:
            print(f"{name}: not started, budget of {a.budget:g} s spent")
            continue
        t0 = time.perf_counter()
        for attempt in (1, 2):
            case = None
            try:
                case = Case(name, cases[name], device, repeats, a.profile_repeats, clock=a.clock,
                            memory=memory_method, cuts=a.cuts, free_backward=a.holds in ("none", "auto"),
                            autocast=a.autocast)
                case.target, case.max_rounds, case.time_budget = a.target, max_rounds, a.timing_budget
                case.fuse = a.fuse_backward
                case.holds = a.holds if a.holds != "auto" else "none" if case.free_record else "peak"
                steps = case.set_steps_per_sample(a.steps_per_sample)
                print(f"{name}: L = {case.chain.L}, profiled in {time.perf_counter() - t0:.1f} s ({det}); "
                      f"{steps} step(s) per timed sample{case.memory_note}")
                t1 = time.perf_counter()
                segs = ((explicit_segments and [k for k in explicit_segments if k <= case.chain.L])
                        or segment_counts(case.chain.L, n_segments)) if thr_out else []
                solved = plan(case.chain, fractions, methods, segs, slots, a.time_limit, workers, case.predict)
                print(f"{name}: {len(solved)} solves in {time.perf_counter() - t1:.1f} s ({workers} worker(s))")
                pending = check_case(case, env, det, fractions, methods, solved)
                pending_thr = throughput_case(case, env, segs, solved, slots, a.time_limit) if thr_out else []
                case.time_all()             # every contender of this network, in alternation
                new = [make() for make in pending]
                new_thr = [make() for make in pending_thr]
                for r in new:
                    if r.get("measured_time") is not None:
                        print(_line(r))
                for r in new_thr:
                    if r["strategy"] == "rotor" and r.get("rotor_gain") is not None:
                        print(_throughput_line(r))
                rows += new
                thr_rows += new_thr
                traces += case.traces
                timings += [{"network": name, "contender": tag, "times": list(m.get("times", [])),
                             "also": list(dict.fromkeys(m.get("also", [])))}
                            for tag, (_, m) in case._contenders.items()]
                break
            except RuntimeError as e:
                if attempt == 1 and _is_determinism_error(e):
                    det = set_deterministic(device, warn_only=True) + f" ({str(e).splitlines()[0][:120]})"
                    print(f"{name}: {str(e).splitlines()[0]}; again with warn_only")
                    continue
                raise
            finally:
                del case
                gc.collect()
                if device.startswith("cuda"):
                    torch.cuda.empty_cache()
        print(f"{name}: done in {time.perf_counter() - t0:.1f} s")
        write_csv(rows, COLUMNS, out)               # after every network: a timeout keeps what was done
        write_csv(thr_rows, THROUGHPUT_COLUMNS, thr_out)
        if a.traces:
            with writing(a.traces):
                Path(a.traces).parent.mkdir(parents=True, exist_ok=True)
                Path(a.traces).write_text(json.dumps({"columns": "bytes per operation, in the order of ops",
                                                      "env": env, "sequences": traces,
                                                      "timings": timings}) + "\n")
    write_csv(rows, COLUMNS, out)
    write_csv(thr_rows, THROUGHPUT_COLUMNS, thr_out)
    measured = [r for r in rows if r.get("measured_peak") is not None]
    from memplan.models.runtime import GRAD_REL_TOL

    bad_grads = [r for r in measured if not grads_ok(r)]
    reordered = [r for r in measured if grads_ok(r) and not r["grads_equal"]]
    over = [r for r in measured if r["within_limit"] is False]
    # issue 27's targets, on the executed plans (autograd's row compares it with store-all's prediction)
    plans = [r for r in measured if r["method"] != "autograd"]
    miss_peak = [r for r in plans if r.get("peak_rel_err") is not None and abs(r["peak_rel_err"]) > PEAK_TARGET]
    miss_time = [r for r in plans if r.get("time_rel_err") is not None and abs(r["time_rel_err"]) > 0.05]
    noisy = [r for r in measured if r.get("noisy")]
    # the plans' rows ("" where the peak is at a forward: nothing held); autograd's have None
    timed = [r for r in measured if r.get("timed_peak") is not None and r.get("held_stages") is not None]
    timed_off = [r for r in timed if abs(r["timed_peak"] - r["measured_peak"]) > 1024]
    print(f"written {out}" + (f" and {thr_out}" if thr_out else ""))
    print(f"{len(measured)} executed rows: gradients differ in {len(bad_grads)}"
          + (f" (in {len(reordered)} more not bit-identical but within {GRAD_REL_TOL:g} of each parameter's "
             f"largest, at most {max(r['grads_max_rel_diff'] for r in reordered):.0e}: a shared parameter's "
             f"contributions summed in another order)" if reordered else "")
          + f", measured peak above the limit in "
          f"{len(over)}, too noisy to use (95% interval of the median wider than {a.target:.0%}) in {len(noisy)}; "
          f"of the {len(plans)} plans' rows, predicted peak off the measured by more than 1% in {len(miss_peak)}, "
          f"time by more than 5% in {len(miss_time)}"
          + "".join(f"; {r['network']} {r['method']}@{r['fraction']}: time {r['time_rel_err']:+.1%}"
                    for r in miss_time[:3]))
    free_nets = sorted({r["network"] for r in timed if r.get("holds") == "none"})
    if free_nets:
        print(f"runs without holds (autograd's own freeing), planned in and compared with the replay of that "
              f"(models.remat.free_backward_chain): {', '.join(free_nets)}")
    timed = [r for r in timed if r.get("holds") != "none"]
    timed_off = [r for r in timed_off if r.get("holds") != "none"]
    if timed:
        sets = [r["held_stages"] for r in timed if r["held_stages"] != "all"]
        how = f"held at their peak, {max(len(h.split()) for h in sets)} stage(s) at most" if sets else "every B held"
        print(f"timed runs ({how}): "
              f"peak within 1 KiB of the measured run's in {len(timed) - len(timed_off)} of {len(timed)} rows"
              + "".join(f"; {r['network']} {r['method']}@{r['fraction']}: {r['timed_peak']:.0f} vs "
                        f"{r['measured_peak']:.0f} B" for r in timed_off[:3]))
    for line in paired_summary(rows, thr_rows):
        print(line)
    for line in throughput_summary(thr_rows):
        print(line)
    return 1 if bad_grads or over else 0


def _verdict(ratio: float | None, low: float | None, high: float | None, target: float = 1.0) -> str:
    """What a paired ratio's interval says against ``target``: shown at most, shown above, or not shown."""
    if ratio is None or low is None or high is None:
        return "not measured"
    if high <= target:
        return f"shown <= {target:g}"
    if low > target:
        return f"shown > {target:g}"
    return f"within the noise of {target:g}"


def paired_summary(rows: list[dict], thr_rows: list[dict]) -> list[str]:
    """Issue 27's time comparisons, paired round by round, per network: store-all over plain autograd
    against 1.03, and memplan's ``sequential``(k) and rotor at its memory over ``checkpoint_sequential``(k)
    against 1."""
    out = []
    for net in dict.fromkeys(r["network"] for r in rows):
        sa = next((r for r in rows if r["network"] == net and r["method"] == "store-all" and r.get("vs_autograd")),
                  None)
        if sa is not None:
            out.append(f"{net}: store-all / autograd {sa['vs_autograd']:.3f} [{sa['vs_autograd_low']:.3f}, "
                       f"{sa['vs_autograd_high']:.3f}] (paired; "
                       f"{_verdict(sa['vs_autograd'], sa['vs_autograd_low'], sa['vs_autograd_high'], 1.03)})")
        for strategy in ("sequential", "rotor"):
            rs = [r for r in thr_rows if r["network"] == net and r["strategy"] == strategy
                  and r.get("vs_checkpoint_sequential") is not None]
            if rs:
                parts = [f"k={r['segments']} {r['vs_checkpoint_sequential']:.3f} "
                         f"[{r['vs_checkpoint_sequential_low']:.3f}, {r['vs_checkpoint_sequential_high']:.3f}]"
                         for r in rs]
                slower = [r["segments"] for r in rs if r["vs_checkpoint_sequential_low"] > 1]
                out.append(f"{net}: {'memplan sequential' if strategy == 'sequential' else 'rotor at its memory'} / "
                           f"checkpoint_sequential, paired: {'; '.join(parts)}"
                           + (f" -- shown slower at k = {', '.join(map(str, slower))}" if slower else
                              " -- not shown slower at any k"))
    return out


if __name__ == "__main__":
    sys.exit(main())
