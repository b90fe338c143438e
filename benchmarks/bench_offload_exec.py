"""Paper 001's offloading schedules executed on real stages (``models.runtime_offload``), against the
simulator: gradients, peak and step time, measured side by side with the store-all step and plain
autograd.

For one zoo network: linearize, profile the chain on the device (times in context), take the host
link's bandwidth (measured on CUDA, ``models.profiler.measure_host_link``, the slower direction; on a CPU
``--bandwidth``, the host being emulated by memory the allocator does not see, so that only the
memory columns mean something there), then at memory limits between paper 001's minimum (0) and the
peak without offloading (1) solve GREEDY and DYNPROG (``memplan.baselines.transfer_plans``: paper 001's
heuristics), convert the schedule (``memplan.models.remat_offload.offload_schedule_as_joint``) and execute it
(``execute_offload``). Each row: the values offloaded, the simulated peak and makespan of the
planned schedule, the measured peak (one window, gradients allocated first), the median time of the
step (``models.measure.interleaved``: every contender once per round in rotating order; on CUDA the
wall clock between synchronizes, one sample the mean of ``--steps-per-sample`` steps), gradients
against plain autograd (``torch.equal``; deterministic kernels).

On CUDA each row also measures the whole step in one window of the caching allocator, both its
allocated and its requested peak (``window_peak_allocated``, ``window_peak_requested``). On the H100
(2026-11-27) the executor as it was, which dropped an offloaded block with ``record_stream`` at the
copy's issue, showed allocated peaks 0-5% below the replay and requested peaks up to 2.6 times it:
the host ran ahead of the copies and the allocator could not reuse the pending blocks. The executor
now frees each storage where the plan says its copy has ended, the compute stream waiting for the
copy there (``OffloadPlan.release_boundaries``); ``predicted_peak_stream`` is the replay of that
order (``OffloadPlan.stream_schedule``), which both statistics should now follow, to the byte
(``peak_rel_err_stream``). Every replay charges each forward its own overhead (:attr:`Chain.of_all`,
:attr:`Chain.of_ng`); files before 2026-11-28 have that replay as ``predicted_peak_executed``, when the
others charged both forwards the larger.

What the GPU run is for: the CUDA path (side stream, pinned buffers, events) first ran on an H100 on
2026-11-26 (``benchmarks/results/offload_exec_gpu_gpt2.csv``); this checks its gradients, whether the
caching allocator's peak follows the simulator's, and whether the transfers hide behind the
computation as the simulated makespan says (a transfer starts at the operation boundary after its
simulated start). On CUDA both directions of the link are measured: paper 001's methods plan with
the two speeds (``memplan.models.offload.link_speeds``; ``--one-speed``: the slower for both, as the
first H100 run did), their rows keep the same schedule replayed at the slower speed
(``predicted_time_one_speed``); the joint DP takes one speed, the slower, and its rows keep its
schedule replayed with the two (``predicted_time_two_way``).

    python benchmarks/bench_offload_exec.py --device cpu --quick            # a dry run, a minute
    python benchmarks/bench_offload_exec.py --device cuda --network gpt2    # GPT-2 small b8 s1024
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import statistics
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
SIZES = {   # (model kwargs, batch, per-sample input shape): GPU sizes, then --quick's
    "gpt2": ({}, 8, (1024,)),          # dropout 0.1: at 0 the embedding's dropout returns its input (a view stage)
    "resnet50": ({}, 32, (3, 224, 224)),
}
QUICK = {
    "gpt2": (dict(n_layer=2, n_embd=64, n_head=2, n_ctx=64, vocab=512), 2, (64,)),
    "resnet50": (dict(num_classes=10), 2, (3, 64, 64)),
}
COLUMNS = ["device", "network", "batch", "input", "L", "bandwidth", "fraction", "memory_limit", "method", "status",
           "offloaded", "predicted_peak", "measured_peak", "peak_rel_err", "within_limit", "predicted_time",
           "predicted_time_two_way", "predicted_time_one_speed", "link", "window_peak_allocated", "window_peak_requested", "predicted_peak_stream", "peak_rel_err_stream", "bandwidth_d2h", "bandwidth_h2d", "measured_time", "time_rel_err", "time_low", "time_high", "noisy", "store_all_time", "autograd_time",
           "grads_equal", "steps_per_sample", "message"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu (a dry run: the host emulated) or cuda")
    p.add_argument("--network", default="gpt2", choices=sorted(SIZES))
    p.add_argument("--quick", action="store_true", help="tiny sizes")
    p.add_argument("--fractions", default="0.1,0.4,0.7", help="limits between paper 001's minimum (0) and the "
                   "peak without offloading (1)")
    p.add_argument("--methods", default="dynprog,greedy,joint", help="paper 001's methods (greedy, dynprog, vdnn, "
                   "tflms, autoswap) and 'joint': paper 000's DP, its parts merged into whole transfers "
                   "(memplan.baselines.transfer_plans)")
    p.add_argument("--bandwidth", default=None, help="bytes/s of the link (e.g. 12GB/s, or two: to the host, to the device, 12GB/s:16GB/s); "
                   "default on CUDA: measured, "
                   "on a CPU: all of the chain's abar moved in one store-all step's time")
    p.add_argument("--one-speed", action="store_true", help="CUDA: plan paper 001's methods with the slower "
                   "direction's speed for both (default: each direction's own)")
    p.add_argument("--steps-per-sample", type=int, default=None, help="default: 1 on a CPU, enough for 0.1 s on CUDA")
    p.add_argument("--fixed-times", action="store_true", help="the chain's times set by formula (1 ms + 1 ms per "
                   "100 kB kept, backward twice forward) instead of measured: the same schedules on every machine "
                   "(dry runs and tests; the time columns then compare nothing)")
    p.add_argument("--times-from", default=None, help="an instance file whose stage times (uf, ub) replace the "
                   "profiled ones (same L): a GPU plan's shape replayed on a CPU, e.g. "
                   "instances/gpt2-small-b8-s1024-h100.json with --batch 1 and the GPU's link divided by 8")
    p.add_argument("--batch", type=int, default=None, help="the batch size (default: the network's GPU or --quick size)")
    p.add_argument("--max-rounds", type=int, default=20)
    p.add_argument("--timing-budget", type=float, default=60.0, help="seconds of timing rounds at most")
    p.add_argument("--time-limit", type=float, default=30.0, help="seconds per solve")
    p.add_argument("--out", default=None, help="CSV (default benchmarks/results/offload_exec_<device>.csv)")
    a = p.parse_args(argv)
    from memplan.experiments.cli_checks import device_problem

    why = device_problem(a.device)          # before the heavier imports: a wrong device fails at once
    if why:
        print(f"bench_offload_exec: {why}", file=sys.stderr)
        return 2

    import torch

    from memplan.experiments.runtime_check import set_deterministic
    from memplan.models.graph import linearize_model
    from memplan.models.measure import interleaved, mean_of_steps, steps_per_sample
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss, measure_host_link, profile_chain
    from memplan.models.remat import simulate_remat, store_all_ops
    from memplan.models.remat_offload import InvalidRematOffloadSchedule, simulate_remat_offload
    from memplan.models.runtime import execute
    from memplan.baselines.transfer_plans import TRANSFER_METHODS, executable_transfers, transfer_range
    from memplan.models.runtime_offload import merge_view_stages, view_stages
    from memplan._frontend import link_arg
    from memplan.models.solution import InputError

    cuda = a.device.startswith("cuda")
    try:
        fractions = [float(v) for v in a.fractions.split(",")]
    except ValueError:
        fractions = []
    if not fractions or any(not 0 <= f <= 1 for f in fractions):
        print(f"bench_offload_exec: --fractions {a.fractions!r}: numbers in [0, 1] separated by commas",
              file=sys.stderr)
        return 2
    methods = [m for m in a.methods.split(",") if m]
    if not methods or any(m not in TRANSFER_METHODS for m in methods):
        print(f"bench_offload_exec: --methods {a.methods!r}: choose from {', '.join(TRANSFER_METHODS)}",
              file=sys.stderr)
        return 2
    if a.steps_per_sample is not None and a.steps_per_sample < 1:
        print("bench_offload_exec: --steps-per-sample: a whole number >= 1", file=sys.stderr)
        return 2
    try:        # one speed, or two written to-host:to-device (memplan.offload.solve's reading)
        bw_arg = link_arg(a.bandwidth, "bench_offload_exec")
    except InputError as e:
        print(str(e).splitlines()[0], file=sys.stderr)
        return 2
    det = set_deterministic(a.device)
    if not cuda:
        torch.set_num_threads(1)
    kw, batch, shape = (QUICK if a.quick else SIZES)[a.network]
    if a.batch is not None:
        if a.batch < 1:
            print("bench_offload_exec: --batch: a whole number >= 1", file=sys.stderr)
            return 2
        batch = a.batch
    if a.times_from and a.fixed_times:
        print("bench_offload_exec: --times-from and --fixed-times both set the times: give one", file=sys.stderr)
        return 2
    src_chain = None
    if a.times_from:
        from memplan.models.instance import load_chain

        try:
            src_chain = load_chain(a.times_from)
        except Exception as e:      # a missing or malformed file: one line naming it
            print(f"bench_offload_exec: --times-from {a.times_from}: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
                  file=sys.stderr)
            return 2
    dev = torch.device(a.device)
    torch.manual_seed(0)
    model = get_model(a.network, **kw).to(dev).train()
    x = example_input(a.network, batch, shape, vocab=kw.get("vocab"), device=dev)
    loss_fn = classification_loss()
    lm = linearize_model(model, x, loss_fn)
    stages, loss_stage = lm.stages, lm.loss_stage(loss_fn)
    params = [q for q in model.parameters() if q.requires_grad]

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    def clear():
        for q in params:
            q.grad = None

    clear()
    torch.manual_seed(7)
    loss_fn(model(x)).backward()
    ref = [q.grad.clone() for q in params]
    t0 = time.perf_counter()
    chain = profile_chain(stages, x, loss_stage, repeats=3, device=dev, names=lm.names, loss_name=lm.loss_name,
                          input_grad=False)
    views = [l for l in view_stages(stages, x) if l >= 2]
    if views:        # a view stage (a flatten, a dropout of rate 0) runs with the stage before it: one value
        stages, chain = merge_view_stages(stages, chain, views)
        print(f"stages {views} are views of their inputs: merged with the stage before each, L = {chain.L}")
    if a.fixed_times:
        uf = 1e-3 * (1.0 + chain.wabar / 1e5)
        uf[0] = 0.0
        chain = dataclasses.replace(chain, uf=uf, ub=2 * uf)
    if src_chain is not None:
        if src_chain.L != chain.L:
            print(f"bench_offload_exec: --times-from {a.times_from}: L = {src_chain.L}, the network's chain has "
                  f"L = {chain.L}", file=sys.stderr)
            return 2
        chain = dataclasses.replace(chain, uf=src_chain.uf.copy(), ub=src_chain.ub.copy())
    print(f"{a.network} b{batch} {'x'.join(map(str, shape))} on {a.device} ({det}): L = {chain.L}, profiled in "
          f"{time.perf_counter() - t0:.1f} s, store-all {chain.store_all_time() * 1e3:.1f} ms", flush=True)
    two_way = None           # (device to host, host to device), where measured: a second prediction
    if isinstance(bw_arg, tuple):
        two_way = bw_arg
        beta, how = min(two_way), "given, the slower of the two"
    elif bw_arg is not None:
        beta, how = bw_arg, "given"
    elif cuda:
        link = measure_host_link(dev)
        two_way = (float(link["d2h_bytes_per_s"]), float(link["h2d_bytes_per_s"]))
        beta, how = min(two_way), (f"measured (slower direction; to the host {two_way[0] / 1e9:.2f}, to the device "
                                   f"{two_way[1] / 1e9:.2f} GB/s)")
    else:
        beta, how = float(chain.wabar[1:].sum() / chain.store_all_time()), "all of abar in one step (CPU emulation)"
    print(f"link {beta / 1e9:.2f} GB/s, {how}", flush=True)
    # paper 001's methods plan with the two measured speeds where there are two (and --one-speed is not given)
    link001 = two_way if two_way is not None and not a.one_speed else beta
    lo, hi = transfer_range(chain, "dynprog", link001)
    steps = a.steps_per_sample or 1
    if cuda and a.steps_per_sample is None:
        steps = steps_per_sample(chain.store_all_time())

    base = {"device": a.device + (f" ({torch.cuda.get_device_name(dev)})" if cuda else ""), "network": a.network,
            "batch": batch, "input": "x".join(map(str, shape)), "L": chain.L, "bandwidth": beta,
            "steps_per_sample": steps}
    rows, runs = [], {}

    def timed(fn):
        return mean_of_steps(fn, steps, sync=sync, before=clear)

    runs["autograd"] = timed(lambda: loss_fn(model(x)).backward())
    runs["store-all"] = timed(lambda: execute(stages, loss_stage, x, store_all_ops(chain.L), device=dev,
                                              input_grad=False, fuse_backward=False))
    jlo, jhi = transfer_range(chain, "joint", beta)
    for f in fractions:
        for m in methods:
            # paper 001's methods between their minimum and the peak without offloading; the joint DP (paper
            # 000, its parts merged into whole transfers) between its least memory and store-all's peak
            mem = float(int(jlo + f * (jhi - jlo))) if m == "joint" else float(int(lo + f * (hi - lo)))
            row = {**base, "fraction": f, "memory_limit": mem, "method": m}
            link = beta if m == "joint" else link001
            # the schedule and the executor's own plan (its replay, the boundaries where it frees and
            # allocates); paper 001's schedule converted can break the joint model's rules (a value freed
            # while read): status "not executed"
            ex = executable_transfers(chain, m, mem, link, time_limit=a.time_limit)
            sched, plan, run, status = ex.schedule, ex.plan, ex.run, ex.status
            if sched is None:
                rows.append({**row, "status": status, "message": ex.message[:200]})
                continue
            clear()
            torch.manual_seed(7)
            try:
                # the executor refuses a value that is a view of another (a flatten)
                if plan is None:
                    raise InvalidRematOffloadSchedule(ex.message)
                rep = plan.replay
                res = run(stages, loss_stage, x, sched, chain, link, device=dev, input_grad=False)
            except InvalidRematOffloadSchedule as e:
                rows.append({**row, "status": "not executed", "message": str(e)[:200],
                             "offloaded": " ".join(str(t.index) for t in sched.transfers if t.kind == "offload")})
                continue
            equal = all(torch.equal(q.grad, r) for q, r in zip(params, ref))
            clear()
            torch.manual_seed(7)
            res = run(stages, loss_stage, x, sched, chain, link, device=dev, input_grad=False, measure_memory=True)
            window = {}
            if cuda:
                # the whole step in one window of the caching allocator, both statistics, as the budget
                # search measures (memplan._compile_budget._measure)
                from memplan._compile_budget import _measure

                _measure(lambda s=sched, run=run, link=link: run(stages, loss_stage, x, s, chain, link, device=dev,
                                                                 input_grad=False), dev, window)
            tag = f"{m}@{f:g}"
            stream = plan.stream_schedule(chain)
            # what the executor holds, in the allocator's order (OffloadPlan.stream_schedule)
            in_order = simulate_remat_offload(chain, *stream).peak_memory
            runs[tag] = timed(lambda s=sched, run=run, link=link: run(stages, loss_stage, x, s, chain, link, device=dev,
                                                                      input_grad=False))
            rows.append({**row, "status": status, "_tag": tag,
                         "offloaded": " ".join(str(t.index) for t in sched.transfers if t.kind == "offload"),
                         "predicted_peak": rep.peak_memory, "measured_peak": res.peak_memory,
                         "predicted_peak_stream": in_order, "peak_rel_err_stream": res.peak_memory / in_order - 1,
                         "peak_rel_err": res.peak_memory / rep.peak_memory - 1, "within_limit": res.peak_memory <= mem,
                         "predicted_time": rep.makespan, "grads_equal": equal,
                         "link": ("two speeds" if isinstance(link, tuple) else "one speed"),
                         # the same schedule replayed with each direction's own speed, and at the slower one
                         "predicted_time_two_way": (simulate_remat_offload(chain, sched, two_way).makespan
                                                    if two_way else None),
                         "predicted_time_one_speed": simulate_remat_offload(chain, sched, beta).makespan,
                         "bandwidth_d2h": two_way[0] if two_way else None,
                         "bandwidth_h2d": two_way[1] if two_way else None,
                         "window_peak_allocated": window.get("allocated"),
                         "window_peak_requested": window.get("requested")})
    t = interleaved(runs, target=0.02, min_rounds=4, max_rounds=a.max_rounds, budget=a.timing_budget,
                    progress=print)
    sa, ag = statistics.median(t["store-all"].times), statistics.median(t["autograd"].times)
    for r in rows:
        r.update(store_all_time=sa, autograd_time=ag)
        tag = r.pop("_tag", None)
        if tag:
            tt = t[tag]
            r.update(measured_time=tt.median, time_low=tt.low, time_high=tt.high, noisy=tt.noisy,
                     time_rel_err=r["predicted_time"] / tt.median - 1)
    out = Path(a.out or RESULTS / f"offload_exec_{'cuda' if cuda else 'cpu'}{'_quick' if a.quick else ''}.csv")
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    sim_sa = simulate_remat(chain, store_all_ops(chain.L))
    print(f"store-all {sa * 1e3:.2f} ms measured ({sim_sa.makespan * 1e3:.2f} predicted), autograd {ag * 1e3:.2f} ms; "
          f"paper 001's minimum {lo / 2**20:.1f} MiB, no offloading {hi / 2**20:.1f} MiB")
    for r in rows:
        if r.get("measured_peak") is None:
            print(f"  {r['method']:8s} f={r['fraction']:<4g} {r['status']}: {r.get('message', '')[:150]}")
            continue
        print(f"  {r['method']:8s} f={r['fraction']:<4g} limit {r['memory_limit'] / 2**20:8.1f} MiB: offloads "
              f"[{r['offloaded']}], peak {r['measured_peak'] / 2**20:8.1f} MiB ({r['peak_rel_err']:+.2%} vs simulated, "
              f"{r['peak_rel_err_stream']:+.2%} vs the executor's order), "
              f"{r['measured_time'] * 1e3:8.2f} ms ({r['time_rel_err']:+.1%} predicted vs measured"
              + (f"; each direction's speed: {r['predicted_time_two_way'] / r['measured_time'] - 1:+.1%}"
                 if r.get("predicted_time_two_way") else "") + ", "
              f"{r['measured_time'] / sa - 1:+.1%} vs store-all){' noisy' if r['noisy'] else ''}, "
              f"gradients {'equal' if r['grads_equal'] else 'DIFFER'}")
        if r.get("window_peak_requested"):
            ps = r["predicted_peak_stream"]
            print(f"{'':17s}one window: requested {r['window_peak_requested'] / ps - 1:+.2%}, allocated "
                  f"{r['window_peak_allocated'] / ps - 1:+.2%} vs the executor's order simulated "
                  f"({ps / 2**20:.1f} MiB; the plan {r['predicted_peak'] / 2**20:.1f} MiB)")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
