"""``memplan profile``, ``memplan import-pipedream`` and ``memplan run``: instance files from real
networks, and re-materialization sequences executed on them.

    memplan profile --model resnet50 --batch 8 --input 3x224x224 --device cpu -o instances/resnet50-b8.json
    memplan import-pipedream instances/pipedream/resnet18.graph.txt --batch 32 -o results/pd18.json
    memplan solve instances/r18.json --problem remat --memory 12MiB --json sol.json
    memplan run instances/r18.json --solution sol.json --check-grads

``profile`` builds a zoo network (models.networks), linearizes it (models.graph) and measures every stage
(models.profiler); ``import-pipedream`` reads a PipeDream profile (models.pipedream). Both write a
``memplan-instance/1`` file (times in ms, sizes in MiB with enough digits to keep exact byte counts)
with the provenance: network, batch, input, device, torch version, date, linearization and groups.
``run`` rebuilds the network from that provenance (same seed, same linearization), executes the
sequence with :func:`models.runtime.execute` and prints measured vs simulated peak memory and time,
and the same against plain ``loss.backward()`` on the unsplit model: its peak by the same tracker,
both timed in alternating rounds (:func:`models.measure.interleaved`) with 95% intervals and the
paired ratio, so that "does the plan beat what PyTorch gives me?" has an answer with its spread; a
third contender of the rounds times store-all per operation, and the plan's makespan on those times
(:func:`_retimed_chain`) separates what the model misses from how the machine's pace has drifted
since the profile.
torch is imported only when ``profile`` or ``run`` runs.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Callable

from memplan.baselines.remat_heuristics import bisection_schedule, sequential_schedule, store_all_schedule
from memplan.experiments.cli_checks import (batch_fits, device_problem, input_shape, key_value, model_kwargs, output_file,
                                            positive_int, seed_arg, writing)
from memplan.models.instance import InstanceError, load_instance, read_text_file, save_instance
from memplan.models.pipedream import import_graph
from memplan.models.remat import RematSchedule, free_backward_model, simulate_remat
from memplan.models.solution import InputError
from memplan.models.units import fmt_bytes, fmt_memory, fmt_time


def _warn_coarse(chain) -> None:
    """Print the instance's ``linearization_warning`` (models.cut_report) on stderr, if it has one."""
    text = chain.provenance.get("linearization_warning")
    if text:
        print(f"warning: {text}", file=sys.stderr)


def _summary(chain) -> str:
    return (f"{chain.name}: L = {chain.L} stages (+ loss), store-all time {fmt_time(chain.store_all_time())}, "
            f"sum abar {fmt_memory(chain.wabar[1:].sum())}, weights {fmt_memory(chain.total_weights())}")


def _cmd_profile(args: argparse.Namespace) -> int:
    import torch

    from memplan.models.networks import canonical_name
    from memplan.models.profiler import profile_model

    try:
        key = canonical_name(args.model)
    except KeyError as e:
        raise InputError(str(e.args[0])) from None
    if args.device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device is available to this torch build")
    if not str(args.output).strip():
        raise InputError("-o/--output: an empty file name; give one, e.g. results/out.json")
    model_kw = model_kwargs(args.set)
    if not 0 <= args.timing_budget < float("inf"):
        raise InputError(f"--timing-budget {args.timing_budget:g}: give seconds >= 0, e.g. --timing-budget 2 "
                         "(0: exactly --repeats timed runs)")
    out = Path(args.output)
    if out.exists() and not args.force and not out.is_dir():      # a folder: output_file says so (--force cannot help)
        raise FileExistsError(f"{out} exists; pass --force to replace it")
    output_file(out, "-o/--output")       # before the (long) profiling
    if args.threads:
        torch.set_num_threads(args.threads)
    batch_fits(key, args.batch, args.input, args.device, model_kw, args.seed)   # before anything of its size is made
    chain = profile_model(key, args.batch, args.input, device=args.device, repeats=args.repeats,
                          seed=args.seed, model_kw=model_kw, cuts=args.cuts, turns=args.turn_model,
                          memory=args.memory_method, free_backward=True, timing_budget=args.timing_budget,
                          autocast=args.autocast)
    if args.name:
        chain.name = args.name
    with writing(out):
        save_instance(chain, out, overwrite=args.force, time_unit="ms", memory_unit="MiB", digits=9,
                      description=f"{key}, batch {args.batch}, input {'x'.join(map(str, chain.provenance['input']))} "
                                  f"profiled on {chain.provenance['device']} by memplan profile")
    _warn_coarse(chain)
    print(_summary(chain))
    print(f"instance written to {out}")
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    if not str(args.output).strip():
        raise InputError("-o/--output: an empty file name; give one, e.g. results/out.json")
    out = Path(args.output)
    if out.exists() and not args.force and not out.is_dir():      # a folder: output_file says so (--force cannot help)
        raise FileExistsError(f"{out} exists; pass --force to replace it")
    if not Path(args.graph).exists():
        raise InstanceError(f"{args.graph}: no such PipeDream graph file")
    output_file(out, "-o/--output")
    chain = import_graph(args.graph, batch=args.batch, name=args.name, cuts=args.cuts)
    with writing(out):
        save_instance(chain, out, overwrite=args.force, time_unit="ms", memory_unit="MiB", digits=9,
                      description=f"PipeDream profile {Path(args.graph).name}, linearized"
                                  + (f", rescaled to batch {args.batch}" if args.batch else ""))
    _warn_coarse(chain)
    print(_summary(chain))
    print(f"instance written to {out}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    """Execute a remat sequence on the network an instance was profiled from; compare with the simulator."""
    import copy

    import torch

    from memplan.models.graph import linearize_model
    from memplan.models.networks import canonical_name, example_input, get_model
    from memplan.models.memory import step_peak
    from memplan.models.profiler import classification_loss, profiled_by_allocator_events
    from memplan.models.runtime import (GRAD_REL_TOL, free_holds, grads_max_rel_diff, holds_at_peak,
                                        holds_at_replay_peak, whole_runs_hold)
    from memplan.models.runtime import execute as execute_plain

    chain, _ = load_instance(args.instance)
    prov = chain.provenance
    if not all(k in prov for k in ("network", "batch", "input", "groups")) or "profile_batch" in prov:
        raise InputError(f"{args.instance}: not made by 'memplan profile' (needs provenance network, batch, "
                       "input, groups), so there is no network to run")
    L = chain.L
    if args.solution and args.sequence is not None:
        raise InputError(f"--solution and --sequence {args.sequence}: give one (the plan of a solution file, or a "
                         "built-in sequence)")
    planned: dict = {}          # what a solution file records of the model it was planned in
    if args.solution:
        (sched, planned), label = _read_remat_solution(args.solution, chain, args.instance), args.solution
    elif args.sequence in (None, "store-all"):
        sched, label = store_all_schedule(chain), "store-all"
    elif args.sequence == "bisection":
        sched, label = bisection_schedule(chain), "bisection"
    else:
        k = _segments_arg(args.sequence, L)
        sched, label = sequential_schedule(chain, k), f"sequential ({k} segments, checkpoint_sequential)"
    device = args.device or ("cuda" if str(prov.get("device", "cpu")).startswith("cuda") else "cpu")
    problem = device_problem(device)
    if problem and args.device is None:     # the instance's own device, not an option the user gave
        problem = (f"{args.instance}: profiled on {prov.get('device')}, but this torch ({torch.__version__}) "
                   f"sees no CUDA device; run it with --device cpu")
    if problem:
        raise InputError(problem)
    if not args.time_budget > 0:
        raise InputError(f"--time-budget {args.time_budget:g}: give positive seconds, e.g. --time-budget 10")
    from memplan.models.profiler import check_example_input

    def field(name, convert, ok=lambda v: True, what=""):
        """A provenance field the network is rebuilt from, or one line naming it (an edited file had
        given tracebacks: an unknown network, a negative batch, a model_kw that is not a table)."""
        if prov.get(name) is None:
            return None
        try:
            v = convert(prov[name])
        except (TypeError, ValueError, OverflowError):
            v = None
        if v is None or not ok(v):
            raise InputError(f"{args.instance}: provenance.{name} = {prov.get(name)!r:.40} cannot be used{what}; "
                             "profile the network again with 'memplan profile'")
        return v

    count = lambda v: int(v) if not isinstance(v, bool) and v == int(v) else None        # noqa: E731
    threads = args.threads
    prov_threads = field("threads", count, lambda v: v >= 1, " (a number of threads >= 1)")
    if threads is None and device == "cpu" and str(prov.get("device", "cpu")) == "cpu" and prov_threads:
        threads = prov_threads              # the profile's: measured and simulated times are then like for like
    if threads:
        torch.set_num_threads(threads)
    seed = field("seed", count, lambda v: 0 <= v < 2**63, " (a seed in 0..2**63-1)") or 0
    kw = field("model_kw", dict, what=" (a table of the network's settings)") or {}
    batch = field("batch", count, lambda v: 1 <= v <= 2**20, " (a batch of 1..1048576)")
    shape = field("input", lambda v: tuple(count(i) for i in v), lambda v: all(i is not None and i >= 1 for i in v),
                  " (a list of whole numbers >= 1)")
    try:
        canonical = canonical_name(prov["network"])
    except KeyError as e:
        raise InputError(f"{args.instance}: provenance.network = {prov['network']!r:.40}: {e.args[0]}") from None
    torch.manual_seed(seed)
    try:
        model = get_model(canonical, **kw).to(device).train()
    except ValueError as e:
        raise InputError(f"{args.instance}: provenance.model_kw: {e}") from None
    x = example_input(canonical, batch, shape, vocab=kw.get("vocab"), seed=seed, device=device)
    try:
        check_example_input(canonical, model, x, shape)
    except InputError as e:
        raise InputError(f"{args.instance}: provenance.input/batch: {e}") from None
    ref = copy.deepcopy(model) if args.check_grads else None
    loss_fn = classification_loss(seed=seed)
    amp = _autocast_of(args.instance, prov, device)       # mixed precision, as the instance was profiled
    execute = _under(amp, execute_plain)
    try:        # the stages the instance was profiled with (an older cut rule included)
        with amp():
            lm = linearize_model(model, x, loss_fn, groups=prov["groups"], head_group=prov.get("loss_group") or [],
                                 cuts="multi" if prov.get("cut_rule") == "multi" else "saved")
    except ValueError:
        lm = None
    if lm is None or lm.L != L:
        raise InputError(f"{args.instance}: its recorded stage groups do not cut the network as traced now "
                         f"({L} stages recorded); profile it again with 'memplan profile'")
    problem = _traced_sizes_problem(prov, lm, x, chain, batch)
    if problem:
        raise InputError(f"{args.instance}: the network rebuilt from provenance.batch = {batch}, provenance.input = "
                         f"{list(shape) if shape else None} and provenance.model_kw = {kw} is not the one profiled: "
                         f"{problem}; profile the network again with 'memplan profile'")
    loss_stage = lm.loss_stage(loss_fn)
    # --holds auto (default): where the profile has the free record ('memplan profile' since 2026-11-29,
    # single-tensor cuts), the plan runs without holds, as autograd frees, against the replay of that
    try:
        free = free_backward_model(chain) if args.holds == "auto" else {}
    except (TypeError, ValueError, KeyError) as e:
        what = str(e) if str(e).startswith("free_backward") else f"free_backward cannot be used ({e})"
        raise InputError(f"{args.instance}: provenance.{what}; profile the network again with 'memplan profile', "
                         "or run with --holds peak") from None
    _check_planned_model(args, planned, chain, sched, free)
    sim = simulate_remat(chain, sched, **free)       # each forward charged its own overhead
    one = simulate_remat(chain, sched, one_overhead=True, **free)   # the papers' one o_f for both forwards
    # one method for the plan and autograd: the instance's (a CPU profile by c10's allocator events sees
    # the kernels' scratch, which the dispatch tracker does not; CUDA: the allocator's statistics)
    method = "profiler" if device == "cpu" and profiled_by_allocator_events(chain) else "dispatch"
    def run_peak(hold) -> float:
        """The peak of the plan run with every B held (``hold`` True) or none (:func:`free_holds`), by
        ``method``, measured on the second run (the first a warm-up), the gradients cleared before and
        after."""
        def run():
            torch.manual_seed((seed + 1) % 2**64)
            execute(lm.stages, loss_stage, x, sched, device=device, hold=hold)

        run()
        for p in model.parameters():
            p.grad = None
        got = step_peak(run, list(model.parameters()), device, method)
        for p in model.parameters():
            p.grad = None
        return got

    if free:        # no holds; the loss's scalars let go where the free replay peaks inside their group
        hold = free_holds(sched, sim.memory_during)
        peak = run_peak(hold)
    elif method == "profiler":
        peak = run_peak(True)                   # the fully held run's
        # timed: held where the replay peaks (the per-operation memory measured above misses the scratch)
        hold = holds_at_replay_peak(sched, sim.memory_during, device=device)
    else:
        # a warm-up first, as run_peak's: the loss's cached targets (8 B at batch 1, 960 B for a GPT-2 of
        # 3 x 40 tokens) were made inside the first measured window, above the plan's limit
        torch.manual_seed((seed + 1) % 2**64)
        execute(lm.stages, loss_stage, x, sched, device=device, hold=True)
        for p in model.parameters():
            p.grad = None
        torch.manual_seed((seed + 1) % 2**64)
        res = execute(lm.stages, loss_stage, x, sched, measure_memory=True, device=device)
        peak = float(res.peak_memory)
        hold = holds_at_peak(sched, res.memory_peak_during, device=device)   # timed: the measured peak, fewer hooks
    ag_peak = _autograd_peak(model, loss_fn, x, device, seed, method, amp=amp)
    per_op: list[list[float]] = []
    whole: list[float] = []
    plan_t, ag_t, ratio = _time_against_autograd(lm.stages, loss_stage, model, loss_fn, x, sched, device, seed,
                                                 args.time_budget, hold, retimed=per_op, retimed_whole=whole,
                                                 whole_hold=whole_runs_hold(lm.stages, loss_stage), amp=amp)
    here, pace = _retimed_chain(chain, per_op, whole)
    sim_here = simulate_remat(here, sched)
    print(f"{chain.name}: {label}, {len(sched)} operations, {sched.count('F_ck') + sched.count('F_none')} "
          f"recomputations; " + ("run without holds, as autograd frees, against the replay of that "
                                 "(models.remat.free_backward_model)" if free else
                                 "paper 004's accounting (the executor holds delta^l and a^l until B^l ends)"))
    how = " (c10 allocator events)" if method == "profiler" else ""
    print(f"peak memory  measured{how} {fmt_memory(peak)}   simulated {fmt_memory(sim.peak_memory)}   "
          f"({(peak / sim.peak_memory - 1) * 100:+.1f}%)"
          + (f"; the papers' one-overhead model says {fmt_memory(one.peak_memory)} (both forwards charged "
             f"the larger o_f)" if one.peak_memory != sim.peak_memory else ""))
    print(f"time         measured {_timing_text(plan_t)}   simulated {fmt_time(sim.makespan)}   "
          f"({(plan_t.median / sim.makespan - 1) * 100:+.1f}%; profiled with {prov.get('threads', '?')} thread(s) "
          f"on {prov.get('device', '?')}, run with {torch.get_num_threads() if device == 'cpu' else '-'})")
    print(f"             simulated on the stages re-timed in these rounds {fmt_time(sim_here.makespan)}   "
          f"({(plan_t.median / sim_here.makespan - 1) * 100:+.1f}%): this machine ran them {pace:.2f}x as long as "
          f"when profiled" + (f" ({prov['date'][:10]})" if prov.get("date") else ""))
    recomputes = sched.count("F_ck") + sched.count("F_none")
    if recomputes and not chain.own_times and plan_t.median < sim_here.makespan * (1 - TIME_MISS):
        # the papers' time model charges a no-grad forward F_all's time (tape included): on small stages
        # a recomputation-heavy plan ran 37% under it (a tiny Llama's recompute-all), -2.6% with the turn model
        print(f"             the plan ran {(1 - plan_t.median / sim_here.makespan) * 100:.0f}% under its simulation: "
              f"this instance has no turn model, so each of its {recomputes} no-grad forwards is charged F_all's "
              f"time (the tape included); `memplan profile --turn-model` times them in context (rotor, revolve "
              f"and the baselines then plan with them)")
    print(f"autograd     plain loss.backward() on the same model and input: peak {fmt_memory(ag_peak)} "
          f"({(peak / ag_peak - 1) * 100:+.1f}% for the plan), time {_timing_text(ag_t)}; "
          f"plan / autograd time {ratio.text()} (paired over {ratio.n} rounds)")
    if plan_t.noisy or ag_t.noisy:
        print(f"             noisy: the 95% interval of a median is wider than {TIME_TARGET:.0%} after "
              f"{len(plan_t.times)} rounds (--time-budget {args.time_budget:g} s); a busy machine, or too short "
              f"a budget")
    ok = True
    if ref is not None:
        for p in model.parameters():       # one more untracked run of the plan for the gradients
            p.grad = None
        torch.manual_seed((seed + 1) % 2**64)
        execute(lm.stages, loss_stage, x, sched, device=device, hold=not free)
        torch.manual_seed((seed + 1) % 2**64)
        with amp():
            out = loss_fn(ref(x))
        out.backward()
        diff = grads_max_rel_diff([p.grad for p in model.parameters()], [q.grad for q in ref.parameters()])
        ok = diff <= GRAD_REL_TOL
        print("gradients    " + ("bit-identical to plain autograd" if diff == 0 else
                                 f"equal to plain autograd within {diff:.0e} of each parameter's largest (not bit "
                                 "for bit: a weight shared by several stages, its contributions added in another "
                                 "order across backward calls)" if ok else
                                 f"DIFFERENT from plain autograd (by {diff:.2g} of a parameter's largest gradient)"))
    return 0 if ok else 1


def _traced_sizes_problem(prov: dict, lm, x, chain, batch) -> str | None:
    """Why the network traced now is not the one the instance recorded (None when its sizes agree):
    each tensor of the provenance's ``cuts`` record (what crosses each cut, the trace's own bytes at
    profile time) against its bytes in this trace; without the record (older files), a^0 against
    the input's bytes (single-tensor cuts). An edited ``batch`` (2 to 3) still traced into the
    recorded stages and ran, its tensors 1.5x the chain's (a ResNet-18's measured peak +13.9% over the
    replay of the recorded sizes, its times unlike the profile's). When every size is off by one factor that another whole batch explains, says so."""
    from memplan.models.memory import storage_bytes

    G = lm.captured.graph
    pairs = []                  # (cut, node, recorded bytes, traced bytes)
    rec = prov.get("cuts")
    for c in rec if isinstance(rec, list) else []:
        for t in (c.get("tensors") or []) + (c.get("resident") or []) if isinstance(c, dict) else []:
            node = t.get("node") if isinstance(t, dict) else None
            if isinstance(node, str) and node in G and isinstance(t.get("bytes"), (int, float)):
                pairs.append((c.get("cut"), node, float(t["bytes"]), float(G.nodes[node].get("out_bytes") or 0)))
    if not pairs and prov.get("cut_rule") != "multi":
        pairs = [(0, "a^0", float(chain.wa[0]), float(storage_bytes(x)))]
    # within a byte or 1e-6: sizes written in MiB with fewer digits (an older Inception-v3 file's a^0 reads
    # 0.00015 B over the input's bytes)
    off = [p for p in pairs if abs(p[2] - p[3]) > max(1.0, 1e-6 * p[2])]
    if not off:
        return None
    cut, node, want, got = off[0]
    text = f"cut {cut}'s tensor {node} is {got:.0f} B traced now, {want:.0f} B recorded"
    implied = {round(batch * w / g, 3) for _, _, w, g in pairs if g > 0} if batch else set()
    if len(implied) == 1:
        b = implied.pop()
        if b == int(b) and b >= 1 and b != batch:
            text += f" (every recorded size is as at batch {int(b)})"
    return text


#: ``run`` times the plan and plain autograd until each median's 95% interval is within this
TIME_TARGET = 0.02
#: a plan's measured time this far under its simulation on the re-timed stages is explained (cmd_run)
TIME_MISS = 0.05


def _autocast_of(instance: str, prov: dict, device: str) -> Callable:
    """A factory of the autocast block the instance was profiled under (its provenance's ``autocast``,
    ``memplan profile --autocast``), one fresh block per step; a no-op factory without the record."""
    from memplan.models.profiler import AUTOCAST_DTYPES
    from memplan.models.runtime import autocast_blocks

    dtype = prov.get("autocast")
    if dtype is not None and dtype not in AUTOCAST_DTYPES:
        raise InputError(f"{instance}: provenance.autocast = {dtype!r:.40} cannot be used (one of "
                         f"{', '.join(AUTOCAST_DTYPES)}); profile the network again with 'memplan profile'")
    return autocast_blocks(dtype, device)


def _under(amp: Callable, fn: Callable) -> Callable:
    """``fn`` called inside a fresh ``amp()`` block (the executor runs its backward with autocast off)."""
    def wrapped(*args, **kw):
        with amp():
            return fn(*args, **kw)
    return wrapped


def _autograd_step(model, loss_fn, x, amp: Callable):
    """Plain autograd's step: the forward and the loss in ``amp()``'s block, ``backward()`` after it."""
    with amp():
        out = loss_fn(model(x))
    out.backward()


def _autograd_peak(model, loss_fn, x, device: str, seed: int, method: str = "dispatch",
                   amp: Callable = contextlib.nullcontext) -> float:
    """Plain ``loss_fn(model(x)).backward()``'s peak, measured as the executed plan's is
    (:func:`models.memory.step_peak`, ``method`` on a CPU): one method for both. ``amp``: the forward
    under that autocast factory's block."""
    import torch

    from memplan.models.memory import grad_input, step_peak

    xi = grad_input(x)

    def step():
        torch.manual_seed((seed + 1) % 2**64)
        _autograd_step(model, loss_fn, xi, amp)

    peak = step_peak(step, list(model.parameters()), device, method)
    for p in model.parameters():
        p.grad = None
    return peak


def _retimed_chain(chain, per_op: list, whole: list | None = None):
    """``(chain, pace)``: ``chain`` with the stage times measured during ``memplan run``'s own rounds
    (``per_op``: the ``op_times`` of store-all runs, :func:`_time_against_autograd`'s ``retimed``),
    scaled so that they add up to the median of untimed store-all runs of the same rounds (``whole``;
    the executor's work between operations included: it had been left out, the sum of the operations
    standing for the run, which made the re-timed prediction 8-10% short on a 2-layer Llama of 10 ms
    steps; without ``whole``, the sums of the operations) (:class:`models.runtime.InContextTimes`),
    and ``pace``, the ratio of their store-all time to the profile's. A no-grad forward's own time and
    the turn cost of a turn-model instance are scaled by ``pace``. A shared CPU's pace drifts (the same
    ResNet-18 store-all step took 53-85 ms in six processes a minute apart): the profile's makespan
    then misses by the drift, the re-timed one shows what the model itself misses."""
    import dataclasses

    import numpy as np

    from memplan.models.runtime import InContextTimes

    ic = InContextTimes.from_runs(per_op, whole if whole else [sum(r) for r in per_op], chain.L)
    uf, ub, _ = ic.calibrated()
    old = float(chain.uf.sum() + chain.ub.sum())
    pace = (sum(uf) + sum(ub)) / old if old > 0 else 1.0
    extra = {}
    if chain.uf_ng is not None:
        extra["uf_ng"] = np.asarray(chain.uf_ng, dtype=float) * pace
    if chain.u_turn:
        extra["u_turn"] = float(chain.u_turn) * pace
    return dataclasses.replace(chain, uf=np.asarray(uf), ub=np.asarray(ub), **extra), pace


def _time_against_autograd(stages, loss_stage, model, loss_fn, x, sched, device: str, seed: int, budget: float,
                           hold=True, retimed: list | None = None, retimed_whole: list | None = None,
                           whole_hold: bool = False, amp: Callable = contextlib.nullcontext):
    """The plan and plain autograd timed in alternating rounds (:func:`models.measure.interleaved`:
    at least 8 rounds, until both medians' 95% intervals are within :data:`TIME_TARGET`, or
    ``budget`` seconds, but never fewer than 6 rounds), one CUDA synchronize around each sample; returns both
    :class:`~models.measure.Timing` and the paired ratio plan / autograd. ``hold``: ``execute``'s, the
    stages held at the measured run's peak (:func:`models.runtime.holds_at_peak`: its peak, less host
    time than every B held). ``retimed``: a list that gets the ``op_times`` of a store-all run
    timed per operation in every round, a third contender (:func:`_retimed_chain`); ``retimed_whole``
    a list that gets the times of a fourth, store-all run untimed as the profile's whole runs are
    (held with ``whole_hold``: :func:`models.runtime.whole_runs_hold`): the
    timed runs' own whole times were 4% above it on a tiny GPT-2 (the timers, and the general loop
    where an untimed store-all takes the fast path). ``amp``: every run's forward under that autocast
    factory's block (:func:`_autocast_of`)."""
    import torch

    from memplan.models.measure import interleaved, mean_of_steps, paired_ratio
    from memplan.models.memory import grad_input
    from memplan.models.runtime import execute as execute_plain

    execute = _under(amp, execute_plain)

    def clear():
        for p in model.parameters():
            p.grad = None

    sync = (lambda: torch.cuda.synchronize(device)) if str(device).startswith("cuda") else (lambda: None)

    def plan():
        torch.manual_seed((seed + 1) % 2**64)
        execute(stages, loss_stage, x, sched, device=device, sync=False, hold=hold)

    def autograd():
        torch.manual_seed((seed + 1) % 2**64)
        _autograd_step(model, loss_fn, grad_input(x), amp)

    runs = {"plan": mean_of_steps(plan, 1, sync=sync, before=clear),
            "autograd": mean_of_steps(autograd, 1, sync=sync, before=clear)}
    if retimed is not None:
        from memplan.models.runtime import store_all_ops

        every = store_all_ops(len(stages))

        def store_all_timed():
            times: list[float] = []
            torch.manual_seed((seed + 1) % 2**64)
            execute(stages, loss_stage, x, every, device=device, op_times=times)
            retimed.append(times)

        def store_all():
            torch.manual_seed((seed + 1) % 2**64)
            execute(stages, loss_stage, x, every, device=device, sync=False, hold=whole_hold)

        runs["retimed"] = mean_of_steps(store_all_timed, 1, sync=sync, before=clear)
        if retimed_whole is not None:
            runs["store-all"] = mean_of_steps(store_all, 1, sync=sync, before=clear)
    res = interleaved(runs, target=TIME_TARGET, budget=budget, floor=6)     # 6: a 95% interval exists
    if retimed is not None and retimed_whole is not None:
        retimed_whole.extend(res["store-all"].times)
    clear()
    return res["plan"], res["autograd"], paired_ratio(res["plan"].times, res["autograd"].times)


def _timing_text(t) -> str:
    return f"{fmt_time(t.median)} [95%: {fmt_time(t.low)}, {fmt_time(t.high)}]"


#: ``details.memory_model`` of a remat Solution written by ``memplan solve``: the model it was planned in
PLANNED_MODELS = {"paper004": "paper 004's model (the executor holding delta^l and a^l until B^l ends)",
                  "free_backward": "the free replay ('memplan solve --free-backward': the executor without holds, "
                                   "as autograd frees)"}


def _check_planned_model(args, planned: dict, chain, sched, free: dict) -> None:
    """Run a solution in the memory model it was planned in (``planned``: :func:`_read_remat_solution`'s
    record; ``free``: the keywords of the replay this run is compared with, empty for paper 004's).
    A plan made with ``--free-backward`` is refused with the holds of paper 004's model (``--holds
    peak``, or an instance without the free record): it can peak over its limit there (8 KiB over on a
    ResNet-18 at its least memory), and did, unsaid. A file without the record (written before it) is judged by its replays: over
    its limit with the holds, within it without. A plan of paper 004's model run without holds (the
    default where the profile has the free record) fits its limit either way; a note says so, with
    both replays' peaks."""
    path, model, limit = args.solution, planned.get("memory_model"), planned.get("memory_limit")
    if not path:
        return
    over_held = False
    if model is None and not free and isinstance(limit, (int, float)) and planned.get("status") != "limit_exceeded":
        try:
            fb = free_backward_model(chain) if args.holds == "peak" else {}
        except (TypeError, ValueError, KeyError):
            fb = {}                 # a broken record: nothing to compare with
        tol = limit * (1 + 1e-9) + 1e-9
        over_held = simulate_remat(chain, sched).peak_memory > tol and bool(fb) and \
            simulate_remat(chain, sched, **fb).peak_memory <= tol
    if (model == "free_backward" or over_held) and not free:
        how = ("details.memory_model free_backward" if model else
               "so its replays say, a file without details.memory_model: over its limit with holds, within it without")
        if args.holds == "peak":
            held = simulate_remat(chain, sched).peak_memory
            raise InputError(f"--solution {path} was planned without holds ('memplan solve --free-backward', {how}) "
                             f"and --holds peak runs it with paper 004's holds, where its replay peaks at "
                             f"{fmt_bytes(held)} B" + (f" (limit {fmt_bytes(limit)} B)" if limit is not None else "")
                             + "; run it with --holds auto, or solve again without --free-backward")
        raise InputError(f"--solution {path} was planned without holds ('memplan solve --free-backward'), and "
                         f"{args.instance} has no provenance.free_backward record to run it so; profile the network "
                         "again with 'memplan profile', or solve again without --free-backward")
    if model == "paper004" and free:
        held, fr = simulate_remat(chain, sched).peak_memory, simulate_remat(chain, sched, **free).peak_memory
        print(f"note: --solution {path} was planned in paper 004's model (peak {fmt_bytes(held)} B there"
              + (f", limit {fmt_bytes(limit)} B" if isinstance(limit, (int, float)) else "")
              + f"); it runs without holds, as autograd frees, against that replay (peak {fmt_bytes(fr)} B); "
              "--holds peak runs it as planned", file=sys.stderr)


def _read_remat_solution(path: str, chain, instance: str) -> tuple[RematSchedule, dict]:
    """The re-materialization sequence of a Solution JSON (``memplan solve --problem remat --json``, or a
    bare list of ``[op, stage]``), and what the file records of its plan (``memory_model``:
    ``details.memory_model``, the model it was planned in, None in a file written before it was
    recorded; ``memory_limit``; ``status``), checked for ``chain``: an error naming the file and what is wrong for
    a file that is not JSON, another problem's solution (pipeline, offload), one without a schedule (an
    infeasible limit), a sequence that is not valid on the chain, or a solution recorded as solved on
    another instance (its ``instance`` fingerprint differs: the plan would run, but to another peak
    than the one it was solved for; solutions written without the record are run as before)."""
    import json

    from memplan.models.remat import InvalidSequence
    from memplan.models.solution import chain_fingerprint

    text = read_text_file(path, "solution file (JSON)", InputError)
    try:
        data = json.loads(text)
    except ValueError as e:
        raise InputError(f"--solution {path}: not a JSON file ({'empty' if not text.strip() else e}); give a "
                         "Solution written by 'memplan solve --problem remat --json'") from None
    if isinstance(data, dict):
        problem = data.get("problem")
        if problem is None or "schedule" not in data:
            what = ("an instance file" if str(data.get("format", "")).startswith("memplan-instance")
                    else "not a Solution (no 'problem' and 'schedule')")
            raise InputError(f"--solution {path}: {what}; give a Solution written by 'memplan solve --problem "
                             "remat --json'")
        if problem != "remat":
            raise InputError(f"--solution {path}: a remat solution with a schedule is needed; this one is problem "
                             f"{problem!r} (solve with --problem remat)")
        if data["schedule"] is None:
            why = str(data.get("message") or "").splitlines()
            raise InputError(f"--solution {path}: has no schedule (status {data.get('status')}"
                             + (f": {why[0]}" if why else "") + "); solve again with a larger --memory")
        rec, mine = data.get("instance"), chain_fingerprint(chain)
        if isinstance(rec, dict) and rec.get("sha256") and rec["sha256"] != mine:
            where = f" ({rec['file']})" if rec.get("file") else ""
            raise InputError(f"--solution {path}: solved on instance {rec.get('name')!r}{where}, L = {rec.get('L')}, "
                             f"sha256 {str(rec['sha256'])[:12]}, not on {instance}: {chain.name!r}, L = {chain.L}, "
                             f"sha256 {mine[:12]}; solve {instance} again")
        if data.get("status") == "limit_exceeded":
            # a plan over its own limit (Checkmate's rounding): run, but not passed off as a plan within it
            print(f"note: --solution {path} has status limit_exceeded: it peaks at "
                  f"{fmt_bytes(float(data.get('peak_memory') or float('nan')))} B, over the limit it was solved for "
                  f"({fmt_bytes(float(data.get('memory_limit') or float('nan')))} B)", file=sys.stderr)
        details = data.get("details") if isinstance(data.get("details"), dict) else {}
        model = details.get("memory_model")
        if model is not None and model not in PLANNED_MODELS:
            raise InputError(f"--solution {path}: details.memory_model = {model!r:.40} is not a memory model of "
                             f"remat ({', '.join(PLANNED_MODELS)}); solve {instance} again")
        limit = data.get("memory_limit")
        planned = {"memory_model": model, "status": data.get("status"),
                   "memory_limit": float(limit) if isinstance(limit, (int, float)) and not isinstance(limit, bool)
                   else None}
        data = data["schedule"]
    else:
        planned = {}
    try:
        sched = RematSchedule.from_json(data)
    except (TypeError, ValueError) as e:
        raise InputError(f"--solution {path}: its schedule is not a list of [op, stage] pairs ({e})") from None
    try:
        simulate_remat(chain, sched)
    except InvalidSequence as e:
        raise InputError(f"--solution {path}: not a valid sequence on {instance} (L = {chain.L}): {e}") from None
    return sched, planned


def _segments_arg(text: str, L: int) -> int:
    """``sequential[:K]``: K segments (default about sqrt(L), as Chen et al. suggest), 1 <= K <= L."""
    name, _, k = text.partition(":")
    if name != "sequential":
        raise InputError(f"--sequence {text!r}: expected store-all, bisection, or sequential[:SEGMENTS]")
    if not k:
        return min(L, max(1, round(L ** 0.5)))
    try:
        n = int(k)
    except ValueError:
        n = 0
    if not 1 <= n <= L:
        raise InputError(f"--sequence {text!r}: the number of segments must be a whole number in 1..{L} "
                         f"(the instance has L = {L} stages)")
    return n


def _name(text: str) -> str:
    """argparse type of ``--name``: not empty (``--name ''`` had been replaced by the default name)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("--name '': an empty name; give one, or leave --name out for the default")
    return text


def _output_args(p, name_help: str) -> None:
    """--name, -o/--output and --force of the commands that write an instance file."""
    p.add_argument("--name", type=_name, help=name_help)
    p.add_argument("-o", "--output", required=True, help="instance file to write")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "profile", help="profile a zoo network into an instance file",
        description="Build a network of the zoo, linearize it into a chain (minimal single-tensor groups) "
                    "and measure u_f, u_b, a, abar, delta, o_f, o_b, W per stage.")
    p.add_argument("--model", required=True, help="resnet18..152, preact_resnet200/1001, densenet121..201, "
                   "inception_v3, vgg16/19, gpt2, llama, nasnet_a, unet, transformer")
    p.add_argument("--batch", type=positive_int, required=True)
    p.add_argument("--input", type=input_shape, default=None,
                   help="per-sample input shape, e.g. 3x224x224 (gpt2: the sequence length, e.g. 512; transformer: "
                   "src_len + tgt_len token ids, e.g. 128 with the default src_len 64)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--autocast", choices=["bfloat16", "float16"], default=None,
                   help="mixed precision: trace and profile under torch.autocast with this dtype (recorded in the "
                        "provenance; 'memplan run' runs the plans and autograd under it too)")
    p.add_argument("--repeats", type=positive_int, default=3, help="timed runs per operation; the median is kept")
    p.add_argument("--timing-budget", type=float, default=2.0, metavar="SECONDS",
                   help="more timed runs after --repeats (50 in all at most; more --repeats are run anyway) while "
                        "the median whole run is not known within 2%%, for up to this many seconds (default 2; 0: "
                        "exactly --repeats)")
    p.add_argument("--seed", type=seed_arg, default=0, help="the model's and the example input's seed, 0 to 2**64 - 1")
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    p.add_argument("--cuts", choices=["auto", "saved", "multi"], default="auto",
                   help="where to cut the network: auto (default) cuts where several tensors cross only for a "
                        "network whose single-tensor stages are too coarse: fewer than one per ten operations "
                        "(NASNet, the Transformer) or one holding most of the network (U-Net)")
    p.add_argument("--turn-model", action="store_true",
                   help="also record the no-grad forwards' own times (u_f_ng) and the cost of a turn (u_turn), "
                        "calibrated in context: rotor, revolve and the baselines plan with them; the other "
                        "re-materialization methods then plan in the papers' time model and claim no optimality")
    p.add_argument("--memory-method", choices=["dispatch", "profiler"], default="dispatch",
                   help="how a CPU profile measures sizes: dispatch (default; the tensors PyTorch's dispatcher "
                        "makes, exact bytes, not a kernel's own scratch) or profiler (c10's allocator events: every "
                        "allocation, the convolutions' scratch included; 'memplan run' then measures the same way)")
    p.add_argument("--set", type=key_value, action="append", metavar="KEY=VALUE",
                   help="model constructor argument, e.g. --set n_layer=6 --set n_embd=512 (repeatable)")
    _output_args(p, "instance name (default: model-bBATCH-INPUT-DEVICE)")
    p.set_defaults(func=_cmd_profile)

    q = subparsers.add_parser(
        "import-pipedream", help="import a PipeDream graph.txt profile as a linearized chain",
        description="Read PipeDream's per-layer profile (graph.txt), linearize the DAG and write an instance.")
    q.add_argument("graph", help="PipeDream graph.txt file")
    q.add_argument("--cuts", choices=["auto", "single", "multi"], default="auto",
                   help="auto (default): cut where several tensors cross only when the single-tensor chain has "
                        "fewer than one stage per ten nodes")
    q.add_argument("--batch", type=positive_int, default=None,
                   help="rescale times and activation sizes linearly from the profile's batch (128)")
    _output_args(q, "instance name")
    q.set_defaults(func=_cmd_import)

    r = subparsers.add_parser(
        "run", help="execute a remat sequence on the profiled network and compare with the simulator",
        description="Rebuild the network of an instance made by 'memplan profile', run a re-materialization "
                    "sequence (a solution JSON from 'memplan solve --json', or a built-in one) with the "
                    "runtime executor, and print measured vs simulated peak memory and time.")
    r.add_argument("instance")
    r.add_argument("--solution", help="Solution JSON written by 'memplan solve --problem remat --json' on this "
                   "instance")
    r.add_argument("--sequence", default=None,
                   help="when no --solution: store-all (default), bisection, or sequential[:SEGMENTS]")
    r.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: the instance's device")
    r.add_argument("--threads", type=positive_int, default=None,
                   help="torch CPU threads (default on CPU: the profile's, so that its times compare)")
    r.add_argument("--check-grads", action="store_true", help="also compare gradients with plain autograd")
    r.add_argument("--holds", choices=["auto", "peak"], default="auto",
                   help="auto (default): run without holds, as autograd frees, and compare with the replay of that "
                        "where the instance has the free record ('memplan profile' since 2026-11-29); peak: paper "
                        "004's accounting, the executor holding delta^l and a^l until B^l ends (held only at the "
                        "peak when timed)")
    r.add_argument("--time-budget", type=float, default=10.0, metavar="SECONDS",
                   help="seconds for timing the plan against plain autograd in alternating rounds until both "
                        "medians are known within 2%% (default 10; at least 6 rounds run whatever the budget)")
    r.set_defaults(func=_cmd_run)
