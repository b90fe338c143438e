"""Issue 28's benchmark: a byte budget for real training steps, PyTorch's budget knob against memplan.

For each network (GPT-2 with 4 layers, width 256, sequence 256; ResNet-50 at batch 2; a Llama-style
stack with SwiGLU MLPs, :mod:`memplan.models.networks.llama`) one training step (forward, loss,
backward) is run by every contender:

- ``pytorch``: ``torch.compile`` with ``torch._functorch.config.activation_memory_budget`` at
  1, 0.7, 0.5, 0.3, 0.2, 0.1, 0.05 (the compiled grid of :class:`memplan._compile_budget.BudgetSearch`);
- ``eager``: plain ``loss_fn(model(x)).backward()``;
- ``checkpoint_sequential``: ``torch.utils.checkpoint.checkpoint_sequential`` (non-reentrant) over the
  model's linearized stages, k segments;
- ``rotor``: memplan's chain plans, rotor (paper 004) at 0, 0.25, 0.5, 0.75, 1 of the way from the
  chain's least memory to store-all, run by :func:`memplan.models.runtime.execute`. For GPT-2 and the
  Llama-style stack the loss (``classification_loss``, a ``TokenLoss``) lets the search also plan a
  chain whose loss stage runs the head and the cross-entropy over chunks of tokens
  (:class:`memplan.models.chunked_loss.ChunkedHeadLoss`; the label says "loss in k chunks"), which
  PyTorch's budget knob does not do: the least memory below PyTorch's lowest comes from it;
- ``rotor-compiled``: the same over the chain's stages each compiled by ``torch.compile`` with the
  backend (:mod:`memplan.models.compiled`; the hierarchy: rotor across stages, the compiler's partitioner
  and fusion within a stage), on the chain profiled with c10's allocator events; its loss stage whole
  (head + cross-entropy compiled as one stage) or, where the eager chain chunks it, over the same chunks
  with each chunk's head and loss compiled (the label says "loss in k chunks"), from the compiled
  chains' least memory; with ``--stage-fractions 1,0.5`` one more chain per fraction below 1, its stages
  compiled with ``activation_memory_budget`` at that fraction and ``--stage-solver`` (default
  ``memplan-peak``, :mod:`memplan.formulations.peak_milp`) deciding keep-or-recompute inside each stage
  (column ``stage_fraction``; the summary compares the chains' least-memory and store-all plans);
- ``rotor-per-stage`` (with two stage fractions or more): rotor's DP choosing, per stage, which of the
  compiled chains' stages to run and which of their whole or chunked loss stages
  (:mod:`memplan.baselines.remat_variants`, exact over every assignment), at 0, 0.25, 0.5, 0.75 of
  [its least memory, the least store-all peak of its sources]; a row only where the best assignment
  mixes fractions;
- ``memplan``: :meth:`BudgetSearch.under` (what ``memplan.compile_under_budget`` returns) at byte
  budgets equal to each PyTorch point's measured peak, then below PyTorch's lowest peak
  (x0.9, 0.75, 0.6, 0.5, ...) down to memplan's least measured peak.

One measuring method for every row: the peak is :func:`memplan.models.memory.profiler_peak` (c10's CPU
allocator, compiled code included; with ``--device cuda`` the caching allocator's peak instead, for every
row and for the search's decisions alike: ``--cuda-peak requested`` (the default, the bytes the tensors
asked for, which do not depend on what the cache held before) or ``allocated`` (``max_memory_allocated``);
the other is kept in ``peak_requested`` / ``peak_allocated``; each window from an emptied cache, the most
of :data:`PEAK_WINDOWS` windows, ``peak_window_spread`` their difference) of one step after a warm-up step, parameters'
gradients already allocated (the window of ``compile_under_budget``). ``search_peak``: a PyTorch
fraction's peak as the search measured it. Times: every distinct step of a network runs once per
round in rotating order (:func:`memplan.models.measure.interleaved`) on the CPU clock (process time, one
torch thread; on CUDA the wall clock between synchronizes, one sample the mean of ``steps_per_sample``
steps back to back), until each median's 95% interval is within 2% of it or ``--max-rounds``;
``noisy`` marks the rows whose interval stayed wider. A ``memplan`` row whose step is the same object as another row's
(the same compiled step or the same chain plan) is timed once: ``same_as`` names that row. Gradients of
every row are compared with eager autograd's (``grad_rel_err``: ||g - g_eager|| / ||g_eager|| over all
parameters) and with a float64 copy's (``grad_err_fp64``; the eager row's is eager's own rounding);
``grads_equal``: ``grad_rel_err`` at most :data:`GRAD_RTOL`, or ``grad_err_fp64`` at most GRAD_RTOL +
:data:`GRAD_FP64_FACTOR` x eager's (as accurate as eager, where float32 or TF32 rounding is large); dropout
is 0 so that compiled and eager steps draw no random masks). ``peak_set_to_none`` is the same step's peak with the
gradients set to None before it (a ``zero_grad()`` loop: the gradients are allocated inside the step);
a compiled backward returns every parameter gradient at once, so in the gradients-kept window it holds
a transient copy of all of them before they are added in place, which eager autograd does not. ``solve_time``: compile seconds
(trace, partition with PyTorch's knapsack, compile) for ``pytorch`` rows, rotor's DP seconds for
``rotor`` and ``rotor-compiled`` rows (the stages' compiles and profile are the latter's
``search_time``); for ``memplan`` rows the solve time of the chosen candidate, ``search_time`` the
whole search (compiles, profile, solves, measurements).

    nice -n 19 python benchmarks/bench_budget.py                 # the real run (~30-60 min on a shared CPU)
    python benchmarks/bench_budget.py --quick                    # tiny sizes, 3 fractions: a few minutes
    memplan plot benchmarks/results/bench_budget_cpu.csv --figure budget -o benchmarks/results

Writes ``--out`` (CSV, one row per contender; ``memplan plot`` draws it) and, beside it, the summary
printed at the end (``.txt``).
"""
from __future__ import annotations

import argparse
import gc
import math
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
FRACTIONS = (1.0, 0.7, 0.5, 0.3, 0.2, 0.1, 0.05)
#: measured windows per row on a GPU (its peak is their most)
PEAK_WINDOWS = 3
BELOW = (0.9, 0.75, 0.6, 0.5, 0.4, 0.3, 0.25, 0.2)
NETWORKS = {
    "gpt2": dict(model="gpt2", kw=dict(n_layer=4, n_embd=256, n_head=4, n_ctx=256, dropout=0.0), shape=(256,),
                 batch=2),
    "resnet50": dict(model="resnet50", kw={}, shape=(3, 160, 160), batch=2),
    "llama": dict(model="llama", kw=dict(vocab=8000, n_ctx=256, n_layer=4, d_model=256, n_head=4), shape=(256,),
                  batch=2),
    # fine-tuning: the embeddings and the first three of the four blocks frozen (run when --networks names it)
    "gpt2-finetune": dict(model="gpt2", kw=dict(n_layer=4, n_embd=256, n_head=4, n_ctx=256, dropout=0.0),
                          shape=(256,), batch=2, freeze=("embed.", "blocks.0.", "blocks.1.", "blocks.2.")),
    # networks nothing here was tuned on (run when --networks names them): runtime_check's cpu-unseen
    # sizes (Inception v3 at 128x128: at 96x96 its last batch norms see 2 values a channel, and eager's
    # gradients were 0.97 from float64's, which left the gradient check nothing to compare), and U-Net
    # (skips crossing several cuts)
    "densenet121": dict(model="densenet121", kw={}, shape=(3, 64, 64), batch=2),
    "inception_v3": dict(model="inception_v3", kw=dict(dropout=0.0), shape=(3, 128, 128), batch=2),
    "transformer": dict(model="transformer", kw=dict(dropout=0.0), shape=(128,), batch=2),
    "unet": dict(model="unet", kw={}, shape=(3, 64, 64), batch=2),
}
#: issue 28's GPU acceptance sizes (the H200 anchor of ../shared/external/gpu-h200/torch_compile_budget.csv):
#: GPT-2 small at batch 8, sequence 1024, and ResNet-50 at batch 32, 224x224; Llama at GPT-2 small's width
GPU = {
    "gpt2": dict(model="gpt2", kw=dict(dropout=0.0), shape=(1024,), batch=8),
    "resnet50": dict(model="resnet50", kw={}, shape=(3, 224, 224), batch=32),
    "llama": dict(model="llama", kw=dict(vocab=32000, n_ctx=1024, n_layer=12, d_model=768, n_head=12), shape=(1024,),
                  batch=4),
}
#: the fractions tried on a GPU (compiles dominate a device call of 10 minutes)
GPU_FRACTIONS = (1.0, 0.5, 0.3, 0.1)
QUICK = {
    "gpt2": dict(model="gpt2", kw=dict(n_layer=2, n_embd=64, n_head=2, n_ctx=64, vocab=512, dropout=0.0),
                 shape=(64,), batch=2),
    "resnet50": dict(model="resnet50", kw=dict(num_classes=10), shape=(3, 64, 64), batch=2),
    "llama": dict(model="llama", kw=dict(vocab=512, n_ctx=64, n_layer=2, d_model=64, n_head=2), shape=(64,),
                  batch=2),
    "gpt2-finetune": dict(model="gpt2", kw=dict(n_layer=2, n_embd=64, n_head=2, n_ctx=64, vocab=512, dropout=0.0),
                          shape=(64,), batch=2, freeze=("embed.", "blocks.0.")),
}
COLUMNS = ["problem", "instance", "network", "method", "label", "batch", "input", "fraction", "memory_limit",
           "status", "objective", "peak_memory", "peak_set_to_none", "search_peak", "predicted_peak", "time_low", "time_high", "rounds", "noisy",
           "throughput", "grads_equal", "grad_rel_err", "grad_err_fp64", "solve_time", "search_time", "same_as", "clock",
           "backend", "message"]


def _grads(params):
    return [None if p.grad is None else p.grad.detach().clone() for p in params]


#: gradients "equal" eager's: ||g - g_eager|| <= GRAD_RTOL ||g_eager|| (2-norms over all parameters
#: together), or as close to the float64 gradients as eager's are (GRAD_FP64_FACTOR below)
GRAD_RTOL = 1e-3
#: Compiled steps (decomposed batch norm, other summation orders, other convolution algorithms) differ
#: from eager in float32 rounding, which a randomly initialized deep network amplifies: on an H100,
#: ResNet-50 at batch 32 with cuDNN's default TF32 convolutions has eager's own gradients 70% away from
#: float64's and Inductor's as far, and 40% from each other (benchmarks/grad_precision.py,
#: benchmarks/results/grad_precision.txt). So a row also counts as equal when its distance to the
#: gradients of a float64 copy of the step is at most GRAD_RTOL + GRAD_FP64_FACTOR x eager's distance.
GRAD_FP64_FACTOR = 2.0


def _rel_err(ref, got) -> float:
    """||got - ref|| / ||ref|| over all parameters together (inf when one has a gradient the other lacks)."""
    num = den = 0.0
    for r, g in zip(ref, got):
        if (r is None) != (g is None):
            return math.inf
        if r is None:
            continue
        num += float(((r.double() - g.double()) ** 2).sum())
        den += float((r.double() ** 2).sum())
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


def _close(ref, got, ref64=None, eager64: float = 0.0) -> tuple[bool, float, float]:
    """(equal, distance to eager's gradients, distance to float64's): equal when within GRAD_RTOL of
    eager's, or at most GRAD_RTOL + GRAD_FP64_FACTOR x ``eager64`` (eager's own distance) from ``ref64``."""
    err = _rel_err(ref, got)
    err64 = _rel_err(ref64, got) if ref64 is not None else math.nan
    ok = err <= GRAD_RTOL or (ref64 is not None and err64 <= GRAD_RTOL + GRAD_FP64_FACTOR * eager64)
    return ok, err, err64


def _grads_fp64(model, x, loss_fn):
    """The parameters' gradients of one step of a float64 copy of ``model`` on ``x`` (floating inputs
    converted, token ids kept), in the order of ``model``'s parameters that require a gradient."""
    import copy

    import torch

    m64 = copy.deepcopy(model).double()
    for p in m64.parameters():
        p.grad = None
    x64 = x.double() if torch.is_floating_point(x) else x
    loss_fn(m64(x64)).backward()
    out = [None if p.grad is None else p.grad.detach() for p in m64.parameters() if p.requires_grad]
    del m64
    return out


def run_network(name: str, spec: dict, *, fractions, backend: str, max_rounds: int, min_rounds: int,
                stage_fractions=(1.0,), stage_solver: str = "memplan-peak", runtime_estimator: str = "flops",
                timing_budget: float | None, clock_name: str, segments, progress=print, device: str = "cpu",
                search_time_limit: float | None = None, deadline: float | None = None,
                steps_per_sample: int | None = None, offload: bool = False, save_offload: str | None = None,
                cuda_peak: str = "requested") -> list[dict]:
    """Every row of one network (see the module docstring). ``deadline``: a ``time.perf_counter()``
    value by which the timing rounds stop (at least two rounds), so that a caller under a hard limit
    still writes its table; rows cut short are marked ``noisy``. ``steps_per_sample``: steps run back
    to back in one timed sample (None: 1 on a CPU, on CUDA enough for 0.1 s of eager's step, 10 at
    most; see ``memplan.experiments.runtime_check.Case.set_steps_per_sample``)."""
    import torch
    from torch.utils.checkpoint import checkpoint_sequential

    from memplan._compile_budget import BudgetSearch
    from memplan.baselines.remat_heuristics import store_all
    from memplan.models.measure import clock as pick_clock
    from memplan.models.measure import interleaved, mean_of_steps
    from memplan.models.measure import steps_per_sample as sampled_steps
    from memplan._compile_budget import _measure
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss
    from memplan.models.solution import InfeasibleError

    cuda = torch.device(device).type == "cuda"
    clock = time.perf_counter if cuda else pick_clock(clock_name, torch.get_num_threads())
    torch.manual_seed(0)
    model = get_model(spec["model"], **spec["kw"]).to(device).train()
    # dropout off (see the module docstring): with masks, a compiled step, eager's and float64's draw
    # differently, and the gradient checks compare nothing (the zoo Transformer's default 0.1 had given
    # eager's gradients 0.35 from float64's, which every row then "equalled")
    dropping = [n for n, m in model.named_modules()
                if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0]
    if dropping:
        raise ValueError(f"bench_budget: network {name!r} has dropout ({dropping[0]}, p > 0); its spec must set "
                         f"it to 0 (e.g. kw=dict(dropout=0.0))")
    for n, p in model.named_parameters():       # a fine-tuning variant: these parameters frozen
        if n.startswith(tuple(spec.get("freeze", ()))):
            p.requires_grad_(False)
    x = example_input(spec["model"], spec["batch"], spec["shape"], vocab=spec["kw"].get("vocab"), device=device)
    dev = torch.device(device)

    stats: dict[str, float] = {}

    def peak_of(fn) -> float:
        # one method for every row: the CUDA caching allocator's statistics on a GPU (the peak chosen
        # by cuda_peak, the search deciding on the same), the profiler's view of c10's CPU allocator on
        # the CPU (memplan._compile_budget._measure, as the search); on a GPU both peaks are kept
        return float(_measure(fn, dev, stats, cuda_peak=cuda_peak))

    loss_fn = classification_loss()     # a TokenLoss: the chain plans may chunk a language model's loss stage

    params = [p for p in model.parameters() if p.requires_grad]
    batch = spec["batch"]
    base = {"problem": "budget", "instance": f"{name}-b{batch}-{'x'.join(map(str, spec['shape']))}",
            "network": name, "batch": batch, "input": "x".join(map(str, spec["shape"])),
            "clock": "wall (synchronized)" if cuda else clock_name,
            "peak_measure": f"cuda {cuda_peak} bytes" if cuda else "cpu profiler (c10 allocator)",
            "backend": backend}

    def eager():
        loss_fn(model(x)).backward()

    ref64 = _grads_fp64(model, x, loss_fn)   # before eager's step: the same batch-norm buffers
    for p in params:
        p.grad = None
    eager()
    ref = _grads(params)
    if steps_per_sample is None:
        steps_per_sample = 1
        if cuda:
            torch.cuda.synchronize(dev)
            t = time.perf_counter()
            eager()
            torch.cuda.synchronize(dev)
            steps_per_sample = sampled_steps(time.perf_counter() - t)
    base["steps_per_sample"] = steps_per_sample
    eager64 = _rel_err(ref64, ref)
    progress(f"{name}: eager autograd's gradients are {eager64:.3g} (relative) from a float64 step's")

    t0 = time.perf_counter()
    search = BudgetSearch(model, (x,), loss_fn=loss_fn, backend=backend, fractions=fractions, repeats=2,
                          solver_time_limit=30.0, time_limit=search_time_limit,
                          stage_fractions=stage_fractions, stage_solver=stage_solver,
                          runtime_estimator=runtime_estimator,
                          progress=lambda line: progress(f"{name}: search: {line}"), offload=offload,
                          cuda_peak=cuda_peak)
    grid_time = time.perf_counter() - t0
    progress(f"{name}: {len(search.compiled)} fractions compiled and measured, chain L = "
             f"{search.chain.L if search.chain else '-'} profiled ({search.profile_time:.1f} s), compiled stages "
             f"{'profiled' if search.compiled_chain else 'not available'} ({search.compiled_profile_time:.1f} s), "
             f"{grid_time:.1f} s, loss chunks {search.loss_chunks} (compiled {search.compiled_loss_chunks}); "
             f"{search.chain_note} {search.compiled_chain_note} {search.compiled_loss_chunks_note}")
    for sf, calls in search.stage_solver_calls.items():
        changed = sum(1 for c in calls if c.get("recompute_runtime") != c.get("dp_recompute_runtime"))
        progress(f"{name}: stages at partitioner budget {sf:g}: {stage_solver} asked {len(calls)} times "
                 f"(a graph the partitioner settles before its knapsack does not ask), its recompute runtime "
                 f"differed from dp_knapsack's in {changed}")

    # contenders: tag -> (run once, row fields)
    runs: dict[str, callable] = {}
    rows: list[dict] = []

    def add(tag: str, fn, row: dict) -> None:
        runs[tag] = fn
        rows.append({**base, **row, "_tag": tag})

    add("eager", eager, {"method": "eager", "label": "eager autograd", "status": "executed"})
    if search.chain is not None:
        stages, loss_stage = search._chain[0], search._chain[1]
        seqmod = torch.nn.Sequential(*stages)
        for k in segments:
            if k > len(stages):
                continue

            def ck(k=k):
                out = checkpoint_sequential(seqmod, k, x, use_reentrant=False)
                loss_stage(out).backward()

            add(f"ckpt{k}", ck, {"method": "checkpoint_sequential", "label": f"checkpoint_sequential k={k}",
                                 "status": "executed", "fraction": k})
    for c, step, cfg in search.compiled:
        def comp(step=step, cfg=cfg):
            import torch._functorch.config as fconfig

            with fconfig.patch(**cfg):
                step(x)

        add(f"pytorch{c.fraction:g}", comp, {"method": "pytorch", "label": f"activation_memory_budget {c.fraction:g}",
                                              "status": "executed", "fraction": c.fraction,
                                              "solve_time": c.compile_time, "search_peak": c.peak, "_runner": step})

    def add_plan(tag: str, cand, f: float, limit: float, method: str, label: str, **extra) -> None:
        """A chain plan measured by the search, as a contender: ``f`` of its range, at ``limit`` bytes."""
        step = search._runner(cand)[0]
        add(tag, lambda step=step: step(x),
            {"method": method, "label": label, "status": "executed", "fraction": f, "memory_limit": limit,
             "predicted_peak": cand.predicted_peak, "solve_time": cand.compile_time, "_runner": step, **extra})

    if search.chain is not None:
        lo, hi = search.chain_minimum, store_all(search.chain).peak_memory
        for f in (0.0, 0.25, 0.5, 0.75, 1.0):
            cand = search.chain_plan(lo + f * (hi - lo))
            if cand is not None:
                add_plan(f"rotor{f:g}", cand, f, lo + f * (hi - lo), "rotor", f"rotor at {f:g} of [min, store-all]")
    for sf, cc in search._cchains.items():
        lo, hi = search.compiled_chain_minimum_at(sf), store_all(cc[3]).peak_memory
        what = "compiled stages" if sf >= 1 else f"stages at partitioner budget {sf:g} ({stage_solver})"
        for f in (0.0, 0.25, 0.5, 0.75, 1.0):
            cand = search.chain_plan(lo + f * (hi - lo), compiled=sf)
            if cand is not None:
                add_plan(f"crotor{f:g}" + ("" if sf >= 1 else f"@{sf:g}"), cand, f, lo + f * (hi - lo),
                         "rotor-compiled", f"rotor, {what}, at {f:g} of [min, store-all]"
                         + (f", loss in {cand.loss_chunks} chunks" if cand.loss_chunks > 1 else "")
                         + (" (gradients in the forward)" if cand.loss_grad_in_forward else ""),
                         stage_fraction=sf, search_time=search.compiled_profile_times.get(sf))
    if search._mixed_sources():
        # a partitioner budget per stage (rotor's DP choosing among the compiled chains' stages and their
        # whole and chunked loss stages): at fractions of [its least memory, the least store-all peak
        # of its sources] (above that, storing all with one fraction is what it picks)
        lo = search.mixed_minimum()
        hi = min(store_all(v[3]).peak_memory for v in search._mixed_sources())
        for f in (0.0, 0.25, 0.5, 0.75):
            cand = search.mixed_plan(lo + f * (hi - lo))
            if cand is not None:
                add_plan(f"mrotor{f:g}", cand, f, lo + f * (hi - lo), "rotor-per-stage",
                         f"rotor, compiled stages at a partitioner budget per stage, at {f:g} of [min, store-all]")
    if search._offload is not None:
        # both kinds with transfers over their own ranges: paper 001's between its minimum and the peak
        # without offloading, the joint DP's between its least memory and store-all's peak
        ch = search._offload[3]
        for kind, fit, fracs, tag, method, span in (
                ("chain-offload", search.offload_fit, (0.25, 0.5, 0.75), "offload", "offload", "min, no offloading"),
                ("chain-joint", search.joint_fit, (0.1, 0.3, 0.5), "joint", "offload-joint", "min, store-all")):
            lo, hi, _ = search._transfer_solver(kind, ch)
            for f in fracs:
                cand = fit(lo + f * (hi - lo))
                if cand is None:
                    progress(f"{name}: {method} at {f:g} of [{span}]: none ({search.offload_note})")
                else:
                    add_plan(f"{tag}{f:g}", cand, f, lo + f * (hi - lo), method, f"{cand.label} ({f:g} of [{span}])")
        if save_offload:
            _save_offload(search, Path(f"{save_offload}_{name}.json"))
            progress(f"{name}: the offloading chain and its {len(search.offload_plans)} executed schedules -> "
                     f"{save_offload}_{name}.json")

    def measure(r: dict, fn) -> None:
        """Gradients against eager's; the peak in compile_under_budget's window (gradients allocated, a
        warm-up step first) and, for reference, in a set_to_none loop's (gradients None before the step)."""
        for p in params:
            p.grad = None
        fn()
        r["grads_equal"], r["grad_rel_err"], r["grad_err_fp64"] = _close(ref, _grads(params), ref64, eager64)
        fn()
        # on a GPU the most of PEAK_WINDOWS windows: allocated bytes include the unsplit rest of a
        # cached block, so one step measured 0.01% apart in two windows (a budget set to one window's
        # peak then refused the very step measured there)
        windows = [peak_of(fn) for _ in range(PEAK_WINDOWS if cuda else 1)]
        r["peak_memory"] = max(windows)
        if cuda:
            r["peak_requested"] = stats["requested"]
            r["peak_allocated"] = stats["allocated"]
            r["peak_window_spread"] = max(windows) - min(windows)
        for p in params:
            p.grad = None
        r["peak_set_to_none"] = peak_of(fn)

    # one measurement method for every row
    for r in rows:
        measure(r, runs[r["_tag"]])
    progress(f"{name}: {len(rows)} contenders measured")

    # memplan at each PyTorch point's measured peak, then below the lowest, down to memplan's minimum
    pts = [r for r in rows if r["method"] == "pytorch"]
    lowest = min(r["peak_memory"] for r in pts)
    least = search.minimum()
    budgets = [(r["peak_memory"], f"at pytorch {r['fraction']:g}") for r in pts]
    budgets += [(lowest * f, f"x{f:g} of pytorch's lowest") for f in BELOW if lowest * f > least.peak]
    budgets.append((float(least.peak), "memplan's least measured peak"))
    budgets.append((float(least.peak) * 0.98, "below memplan's least (refused)"))
    by_runner = {id(r["_runner"]): r for r in rows if r.get("_runner") is not None}
    for budget, why in budgets:
        t1 = time.perf_counter()
        try:
            step = search.under(int(budget))
        except InfeasibleError as e:
            rows.append({**base, "method": "memplan", "label": why, "memory_limit": int(budget), "status": "refused",
                         "message": str(e)[:300], "search_time": grid_time + time.perf_counter() - t1})
            continue
        runner = step._fn
        same = by_runner.get(id(runner))
        if search.rechecked:
            progress(f"{name}: budget {int(budget)} ({why}): measured again (label, search, again): "
                     + "; ".join(f"{lab}: {a} -> {b}" for lab, a, b in search.rechecked))
        row = {"method": "memplan", "label": f"{why}: {step.choice.label}", "memory_limit": int(budget),
               "status": "executed", "fraction": step.fraction, "solve_time": step.choice.compile_time,
               "search_time": grid_time + time.perf_counter() - t1,
               "predicted_peak": step.choice.predicted_peak}
        if same is None:        # a chain plan solved for this budget only: its own contender
            tag = f"memplan{len(rows)}"

            def mp(step=step):
                step(x)

            add(tag, mp, {**row, "_runner": runner})
            r = rows[-1]
            measure(r, mp)
            by_runner[id(runner)] = r
        else:
            rows.append({**base, **row, "same_as": same["label"], "_same": same["_tag"],
                         "peak_memory": same["peak_memory"], "peak_set_to_none": same.get("peak_set_to_none"),
                         "peak_requested": same.get("peak_requested"),
                         "peak_allocated": same.get("peak_allocated"),
                         "peak_window_spread": same.get("peak_window_spread"),
                         "grads_equal": same["grads_equal"], "grad_rel_err": same["grad_rel_err"],
                         "grad_err_fp64": same.get("grad_err_fp64")})
    progress(f"{name}: {len(budgets)} budgets answered; timing {len(runs)} distinct steps")

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    def timed(fn):
        return mean_of_steps(fn, steps_per_sample, sync=sync, clock=clock)

    if deadline is not None:
        left = max(0.0, deadline - time.perf_counter())
        timing_budget = left if timing_budget is None else min(timing_budget, left)
        progress(f"{name}: {left:.0f} s left before the deadline; timing for {timing_budget:.0f} s at most")
    res = interleaved({tag: timed(fn) for tag, fn in runs.items()}, target=0.02, min_rounds=min_rounds,
                      max_rounds=max_rounds, budget=timing_budget, progress=lambda s: progress(f"{name}: {s}"))
    for r in rows:
        tag = r.get("_same") or r.get("_tag")
        if tag in res and r["status"] == "executed":
            t = res[tag]
            r.update(objective=t.median, time_low=t.low, time_high=t.high, rounds=len(t.times), noisy=t.noisy,
                     throughput=batch / t.median, round_times_ms=" ".join(f"{v * 1e3:.3f}" for v in t.times))
        if r["method"] == "memplan" and r["status"] == "executed":
            r["within_budget"] = r["peak_memory"] <= r["memory_limit"]
    for r in rows:
        for k in [k for k in r if k.startswith("_")]:
            del r[k]
    del search, runs
    gc.collect()
    return rows


def _save_offload(search, path: Path) -> None:
    """The chain the transfer candidates were planned on (an instance, ``memplan.models.instance``'s
    format), the link, and every executed transfer schedule (``RematOffloadSchedule.to_json``, the
    limit it was solved at, the replay's peak and the measured one) in one JSON file: what replays a
    candidate whose measured peak differs from its prediction, operation by operation, off the GPU
    (``RematOffloadSchedule.from_json`` and ``simulate_remat_offload(chain, schedule, link)``)."""
    import json

    from memplan.models.instance import chain_to_dict

    chain = search._offload[3]
    plans = []
    for key, (cand, _) in search.offload_plans.items():
        kind, sf, moved, _ = key
        plans.append({"kind": kind, "stage_fraction": sf, "offloaded": list(moved),
                      "memory_limit": cand.memory_limit, "predicted_peak": cand.predicted_peak,
                      "measured_peak": cand.peak, "label": cand.label,
                      "schedule": search.offload_schedules[key].to_json()})
    link = search.link001 if search.link001 is not None else search.bandwidth
    from memplan.experiments.cli_checks import writing

    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"chain": chain_to_dict(chain, time_unit="s", memory_unit="B", digits=None),
                                    "bandwidth": search.bandwidth, "link": link, "plans": plans},
                                   indent=1, default=str) + "\n")


def _num(v):
    """A number, or None for a missing value (None or NaN, as a CSV read back gives)."""
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def _truthy(v) -> bool:
    """A CSV's True/False read back (pandas: bool, or a string), or a run's bool."""
    return v is True or (isinstance(v, str) and v.strip().lower() == "true") or (v is not None and v == 1)


def _round_times(r: dict) -> list[float] | None:
    v = r.get("round_times_ms")
    if not isinstance(v, str) or not v.strip():
        return None
    return [float(t) for t in v.split()]


def _paired(a: dict, b: dict):
    """Row ``a``'s time over row ``b``'s, paired round by round (:func:`memplan.models.measure.paired_ratio`:
    every distinct step is timed once per round), or None without both rows' round times."""
    from memplan.models.measure import paired_ratio

    ta, tb = _round_times(a), _round_times(b)
    if not ta or not tb or len(ta) != len(tb):
        return None
    return paired_ratio(ta, tb)


def summary(rows: list[dict]) -> list[str]:
    """The acceptance of issue 28 on these rows (from a run, or from its CSV: ``--summary``)."""
    out = []
    nets = list(dict.fromkeys(r["network"] for r in rows))
    for net in nets:
        d = [r for r in rows if r["network"] == net]
        pts = [r for r in d if r["method"] == "pytorch"]
        mp = [r for r in d if r["method"] == "memplan" and r["status"] == "executed"]
        eager = next(r for r in d if r["method"] == "eager")
        lowest = min(r["peak_memory"] for r in pts)
        least = min((r["peak_memory"] for r in mp), default=math.nan)
        over = [r for r in mp if r["peak_memory"] > r["memory_limit"]]
        bad = [r for r in d if r["status"] == "executed" and not _truthy(r.get("grads_equal"))]
        out.append(f"{net}: eager {eager['peak_memory'] / 2**20:.1f} MiB {eager['objective'] * 1e3:.0f} ms; "
                   f"PyTorch's lowest peak {lowest / 2**20:.1f} MiB; memplan's least {least / 2**20:.1f} MiB "
                   f"({(1 - least / lowest) * 100:.0f}% below); memplan rows over budget: {len(over)}; "
                   f"rows with gradients not equal to eager: {len(bad)}"
                   + (f" ({', '.join(r['label'] for r in bad)})" if bad else "")
                   + (f"; eager's gradients {eager['grad_err_fp64']:.2g} from float64's"
                      if _num(eager.get("grad_err_fp64")) is not None else ""))
        lowest_none = min(r["peak_set_to_none"] for r in pts)
        # every candidate memplan chooses from: the compiled fractions and the chain plans
        least_none = min((r["peak_set_to_none"] for r in d if r["method"] in ("pytorch", "rotor", "rotor-compiled",
                                                                               "rotor-per-stage", "memplan")
                          and _num(r.get("peak_set_to_none")) is not None), default=math.nan)
        out.append(f"  set_to_none window (gradients allocated inside the step): eager "
                   f"{eager['peak_set_to_none'] / 2**20:.1f} MiB, PyTorch's lowest {lowest_none / 2**20:.1f} MiB, "
                   f"least of memplan's candidates {least_none / 2**20:.1f} MiB "
                   f"({(1 - least_none / lowest_none) * 100:.0f}% below)")
        for p in pts:
            m = next((r for r in mp if r["label"].startswith(f"at pytorch {p['fraction']:g}:")), None)
            if m is None:
                out.append(f"  fraction {p['fraction']:g}: no memplan row")
                continue
            pr = _paired(m, p)
            same = m.get("same_as") == p.get("label") or m["label"].endswith(f": {p['label']}")
            if pr is not None:      # the verdict from the rounds: memplan's time over PyTorch's in each
                faster, overlap = pr.median <= 1, not pr.shown_slower
            else:                   # a CSV from before round_times_ms: the two intervals
                faster = m["objective"] <= p["objective"]
                overlap = m["time_low"] <= p["time_high"]
            out.append(f"  fraction {p['fraction']:<4g} peak {p['peak_memory'] / 2**20:7.1f} MiB "
                       f"{p['objective'] * 1e3:7.1f} ms [{p['time_low'] * 1e3:.1f}, {p['time_high'] * 1e3:.1f}]"
                       f"{' noisy' if p['noisy'] else ''} | memplan {m['peak_memory'] / 2**20:7.1f} MiB "
                       f"{m['objective'] * 1e3:7.1f} ms [{m['time_low'] * 1e3:.1f}, {m['time_high'] * 1e3:.1f}]"
                       f"{' noisy' if m['noisy'] else ''} ({p['objective'] / m['objective'] - 1:+.1%} throughput; "
                       + (f"paired {pr.text()}; " if pr is not None else "")
                       + f"{'the same step' if same else 'faster' if faster else 'within noise' if overlap else 'SLOWER'}) <- "
                       f"{m['label'].split(': ', 1)[1]}")
        for m in mp:
            if "pytorch's lowest" in m["label"] or "least" in m["label"]:
                out.append(f"  budget {m['memory_limit'] / 2**20:7.1f} MiB ({m['label']}): peak "
                           f"{m['peak_memory'] / 2**20:.1f} MiB, {m['objective'] * 1e3:.1f} ms"
                           f"{' noisy' if m['noisy'] else ''}")
        for r in d:
            if r["status"] == "refused":
                out.append(f"  budget {r['memory_limit'] / 2**20:.1f} MiB refused: {r['message'][:160]}")
        cr = [r for r in d if r["method"] == "rotor-compiled" and r["status"] == "executed"]
        sfs = sorted({_num(r.get("stage_fraction")) or 1.0 for r in cr}, reverse=True)
        if len(sfs) > 1:
            for sf in sfs:
                rs = {r["fraction"]: r for r in cr if (_num(r.get("stage_fraction")) or 1.0) == sf}
                parts = [f"{what} {rs[f]['peak_memory'] / 2**20:.2f} MiB {rs[f]['objective'] * 1e3:.1f} ms"
                         for f, what in ((0.0, "least-memory plan"), (1.0, "store-all")) if f in rs]
                out.append(f"  compiled stages at partitioner budget {sf:g}: {'; '.join(parts)}"
                           + (f" (compile and profile {_num(next(iter(rs.values())).get('search_time')) or 0:.1f} s)"
                              if rs else ""))
        pst = [r for r in d if r["method"] == "rotor-per-stage" and r["status"] == "executed"]
        if pst:
            out.append("  a partitioner budget per stage: " + "; ".join(
                f"{r['peak_memory'] / 2**20:.2f} MiB {r['objective'] * 1e3:.1f} ms" for r in pst))
        solves = [r["solve_time"] for r in d if r["method"] in ("rotor", "rotor-compiled", "rotor-per-stage")
                  and _num(r.get("solve_time")) is not None]
        comp = [r["solve_time"] for r in pts if r.get("solve_time") is not None]
        out.append(f"  solve: rotor DP {max(solves, default=0):.2f} s at most; compiles {min(comp):.1f}-"
                   f"{max(comp):.1f} s; noisy rows: {sum(bool(r.get('noisy')) for r in d if r['status'] == 'executed')}")
    return out


def write_csv(rows: list[dict], path: Path) -> None:
    """Rewrite ``path`` with ``rows``; a failed write is one line ``cannot write PATH: REASON``."""
    import csv

    from memplan.experiments.cli_checks import writing

    cols = COLUMNS + sorted({k for r in rows for k in r} - set(COLUMNS))
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            w.writerows(rows)


def _read_results(path: Path, flag: str):
    """A CSV this script wrote (``--summary``, ``--update``'s ``--out``) as a DataFrame, or one line
    naming ``flag`` and the file where it is not one (a missing file, another CSV: had ended in a
    traceback)."""
    import pandas as pd

    from memplan.experiments.cli_checks import CliError

    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as e:          # pandas' ParserError and EmptyDataError are ValueErrors
        reason = (e.strerror if isinstance(e, OSError) and e.strerror else str(e).strip().splitlines()[0])
        raise CliError(f"{flag} {path}: cannot read it as a CSV ({reason}); give a CSV written by "
                       "bench_budget --out") from None
    missing = [c for c in ("network", "method", "label", "status", "same_as", "peak_memory") if c not in df.columns]
    if missing:
        raise CliError(f"{flag} {path}: not a CSV written by bench_budget --out (no column "
                       f"{', '.join(missing)})")
    return df


def main(argv=None) -> int:
    from memplan.experiments.cli_checks import OneLineParser, positive_int, positive_number, run_script

    p = OneLineParser(prog="python benchmarks/bench_budget.py", name="bench_budget",
                      description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, fractions 1, 0.5, 0.1, 2 rounds: a few minutes")
    p.add_argument("--networks", default="gpt2,resnet50,llama")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda: on cuda the sizes are --sizes gpu's, "
                   "the peak the caching allocator's statistics, the clock the wall clock between synchronizes")
    p.add_argument("--sizes", choices=["cpu", "gpu"], default=None, help="the networks' sizes: cpu (this file's "
                   "NETWORKS) or gpu (GPU: GPT-2 small b8 s1024, ResNet-50 b32 224x224, Llama 12x768 b4 s1024, "
                   "fractions 1, 0.5, 0.3, 0.1); default: gpu on cuda, cpu otherwise")
    p.add_argument("--fractions", default=None, help="comma-separated activation_memory_budget values in (0, 1], "
                   "compiled in this order until --search-time-limit (default: 1,0.7,0.5,0.3,0.2,0.1,0.05 on the CPU "
                   "sizes, 1,0.5,0.3,0.1 on the GPU sizes)")
    p.add_argument("--deadline", type=float, default=None, metavar="SECONDS",
                   help="seconds for the whole run: each network's timing rounds stop in time to write the table "
                   "(for a caller under a hard limit, e.g. a device call)")
    p.add_argument("--search-time-limit", type=positive_number, default=None,
                   help="seconds for each network's compiled grid (fractions not reached are reported untried)")
    p.add_argument("--backend", default="aot_eager_decomp_partition", choices=["aot_eager_decomp_partition", "inductor"])
    p.add_argument("--clock", default="cpu", choices=["cpu", "wall"])
    p.add_argument("--stage-fractions", default="1", help="comma-separated partitioner budgets in [0, 1] for the "
                   "compiled stages (one compiled chain each; default 1: the partitioner's own choice)")
    p.add_argument("--stage-solver", default="memplan-peak", choices=["memplan-peak", "pytorch", "memplan"],
                   help="keep-or-recompute solver inside stages compiled at a partitioner budget below 1")
    p.add_argument("--runtime-estimator", default="flops", choices=["flops", "measured"],
                   help="recompute costs of the partitioner's knapsacks: PyTorch's FLOP count or each operation "
                   "timed alone (memplan.models.op_timing)")
    p.add_argument("--steps-per-sample", type=positive_int, default=None, help="steps run back to back in one timed "
                   "sample (default: 1 on cpu; on cuda enough for 0.1 s of eager's step, 10 at most)")
    p.add_argument("--offload", action="store_true", help="also offloading over the chain (paper 001 alone, paper 000 "
                   "with recomputation), executed (memplan.models.runtime_offload; --device cuda only: on a CPU the "
                   "host is the same memory)")
    p.add_argument("--save-offload", metavar="PREFIX", help="with --offload: write the chain the transfer candidates "
                   "were planned on and every executed transfer schedule (ops, transfers, limit, predicted and "
                   "measured peak) to PREFIX_<network>.json, to replay a mispredicted row off the GPU")
    p.add_argument("--cuda-peak", default="requested", choices=["requested", "allocated"],
                   help="--device cuda: the caching allocator's peak for every row and for the search's decisions "
                        "(default requested: the same in every window; allocated: max_memory_allocated)")
    p.add_argument("--min-rounds", type=positive_int, default=None)
    p.add_argument("--max-rounds", type=positive_int, default=None)
    p.add_argument("--timing-budget", type=positive_number, default=None, help="seconds of timing rounds per network")
    p.add_argument("--out", default=None, help="CSV (default benchmarks/results/bench_budget_cpu.csv; --quick: "
                   "/tmp/bench_budget_quick.csv)")
    p.add_argument("--summary", metavar="CSV", help="print the summary of a written CSV again, run nothing")
    p.add_argument("--update", action="store_true", help="keep the rows of the networks not run from the existing "
                   "--out CSV (their header line from its .txt), replace those of the networks run")
    return run_script(p, lambda a: _main(a, argv), argv)


def _main(a: argparse.Namespace, argv) -> int:
    """:func:`main`'s body: an error meant for the user is raised (``CliError``, ``InputError``), and
    :func:`memplan.experiments.cli_checks.run_script` prints it as one line, exit status 2."""
    from memplan.experiments.cli_checks import CliError, device_problem, output_file

    if a.summary:
        df = _read_results(Path(a.summary), "--summary")
        df["same_as"] = df["same_as"].where(df["same_as"].notna(), None)
        try:
            lines = summary(df.to_dict("records"))
        except (KeyError, TypeError, ValueError) as e:
            raise CliError(f"--summary {a.summary}: not a CSV written by bench_budget --out "
                           f"({type(e).__name__}: {e})") from None
        print("\n".join(lines))
        return 0
    import torch

    torch.set_num_threads(1)
    why = device_problem(a.device)
    if why:
        raise CliError(why)
    cuda = a.device.startswith("cuda")
    try:
        stage_fractions = tuple(float(v) for v in a.stage_fractions.split(","))
    except ValueError:
        stage_fractions = ()
    if not stage_fractions or any(not 0 <= v <= 1 for v in stage_fractions) or \
            len(set(stage_fractions)) != len(stage_fractions):
        raise CliError(f"--stage-fractions {a.stage_fractions!r}: give distinct numbers in [0, 1] separated by "
                       "commas, e.g. 1,0.5")
    if a.stage_solver != "memplan-peak" and min(stage_fractions) >= 1:
        # BudgetSearch refuses it too, after eager's and float64's steps and in a traceback
        raise CliError(f"--stage-solver {a.stage_solver}: the solver inside stages compiled at a stage fraction "
                       "below 1, and --stage-fractions has none; add one (e.g. --stage-fractions 1,0.5), or leave "
                       "--stage-solver out")
    fractions = None
    if a.fractions is not None:
        try:
            fractions = tuple(float(v) for v in a.fractions.split(","))
        except ValueError:
            fractions = ()
        if not fractions or any(not 0 < v <= 1 for v in fractions) or len(set(fractions)) != len(fractions):
            raise CliError(f"--fractions {a.fractions!r}: give distinct numbers in (0, 1] separated by commas, "
                           "e.g. 1,0.5,0.2")
    if a.cuda_peak != "requested" and not cuda:
        # as memplan budget; BudgetSearch refuses it too, but after eager's and float64's steps, in a traceback
        raise CliError(f"--cuda-peak {a.cuda_peak}: reads the CUDA caching allocator, and --device is {a.device}; "
                       "leave it out (on a CPU every peak is the profiler's view of c10's allocator)")
    if a.offload and not cuda:
        raise CliError("--offload needs --device cuda (on a CPU the host is the same memory: nothing would be saved)")
    if a.save_offload and not a.offload:
        raise CliError("--save-offload needs --offload (it saves the transfer candidates' schedules)")
    if a.deadline is not None and not (0 < a.deadline < math.inf):
        raise CliError(f"--deadline {a.deadline:g}: give a finite, positive number of seconds")
    if a.min_rounds is not None and a.max_rounds is not None and a.min_rounds > a.max_rounds:
        raise CliError(f"--min-rounds {a.min_rounds} is above --max-rounds {a.max_rounds}; give --min-rounds at most "
                       "--max-rounds")
    if a.sizes is not None and a.quick:
        raise CliError(f"--sizes {a.sizes} and --quick: --quick runs its own tiny sizes; give one of the two")
    sizes = a.sizes or ("gpu" if cuda else "cpu")
    specs = QUICK if a.quick else GPU if sizes == "gpu" else NETWORKS
    names = [n for n in a.networks.split(",") if n]
    if not names:
        raise CliError(f"--networks {a.networks!r}: no network named; give some of {', '.join(specs)}")
    for n in names:
        if n not in specs:
            raise CliError(f"--networks: unknown {n!r}; choose from {', '.join(specs)}")
    out = Path(a.out if a.out is not None else ("/tmp/bench_budget_quick.csv" if a.quick else
                                                RESULTS / ("bench_budget_gpu.csv" if cuda else "bench_budget_cpu.csv")))
    if out.suffix.lower() == ".txt":
        raise CliError(f"--out {a.out}: the summary is written beside the CSV as {out.with_suffix('.txt').name}, "
                       "the same file; give a name ending in .csv")
    # the outputs checked before any step runs (a run is never lost to a path that cannot be written)
    out = output_file(out, "--out")
    output_file(out.with_suffix(".txt"), "--out")
    for n in names if a.save_offload else []:
        output_file(f"{a.save_offload}_{n}.json", "--save-offload")
    fractions = fractions or ((1.0, 0.5, 0.1) if a.quick else GPU_FRACTIONS if sizes == "gpu" else FRACTIONS)
    min_rounds = a.min_rounds or (2 if a.quick else 6)
    max_rounds = a.max_rounds or (2 if a.quick else 12)
    rows: list[dict] = []
    kept: list[dict] = []
    kept_note = ""
    if a.update and out.exists():
        old = _read_results(out, "--update: --out")
        kept = [{k: _num(v) for k, v in r.items()} for r in old.to_dict("records") if r["network"] not in names]
        old_txt = out.with_suffix(".txt")
        nets = ", ".join(dict.fromkeys(r["network"] for r in kept))
        if kept:
            head = old_txt.read_text().splitlines()[:2] if old_txt.exists() else []
            if len(head) == 2 and head[1].startswith(f"  (rows of {nets} kept from"):
                kept_note = head[1].strip()[1:-1]         # kept again: where they came from first
            else:
                kept_note = f"rows of {nets} kept from the previous run" + (f": {head[0]}" if head else "")
    t0 = time.perf_counter()
    deadline = None if a.deadline is None else t0 + a.deadline
    for n in names:
        t1 = time.perf_counter()
        rows += run_network(n, specs[n], fractions=fractions, backend=a.backend, max_rounds=max_rounds,
                            min_rounds=min_rounds, timing_budget=a.timing_budget, clock_name=a.clock,
                            segments=(2, 4), device=a.device, search_time_limit=a.search_time_limit,
                            stage_fractions=stage_fractions, stage_solver=a.stage_solver,
                            runtime_estimator=a.runtime_estimator, deadline=deadline,
                            steps_per_sample=a.steps_per_sample, offload=a.offload, cuda_peak=a.cuda_peak,
                            save_offload=a.save_offload)
        print(f"{n}: done in {time.perf_counter() - t1:.0f} s", flush=True)
        write_csv(kept + rows, out)
    lines = [f"bench_budget {' '.join(sys.argv[1:] if argv is None else argv)} (torch {torch.__version__}, "
             f"backend {a.backend}, "
             + (f"{torch.cuda.get_device_name(torch.device(a.device))}, wall clock between synchronizes, "
                if cuda else f"clock {a.clock}, one thread, ")
             + f"{time.perf_counter() - t0:.0f} s)"]
    lines += ([f"  ({kept_note})"] if kept_note else []) + summary(kept + rows)
    text = "\n".join(lines) + "\n"
    print(text)
    from memplan.experiments.cli_checks import writing

    with writing(out.with_suffix(".txt")):
        out.with_suffix(".txt").write_text(text)
    print(f"wrote {out} and {out.with_suffix('.txt')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
