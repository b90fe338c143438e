"""What slows some samples of a short GPU step (issue 27, ResNet-50 batch 32 on an H100): every sample
is dissected instead of summarised.

On the H100 (2026-11-27, ``benchmarks/results/paired_ratios_gpu_resnet50_2026-11-27.txt``) every
executed plan's *fastest* samples were within -3.1% to +0.5% of its predicted time, and its 10th
percentile within 2.8%, but the medians of the ``sequential`` plans (memplan's and PyTorch's
``checkpoint_sequential``) were 2-19% above, growing with the segment count, while rotor's stayed within
2.8%: some samples are slowed by something the model does not have, and memplan's ``sequential`` more
often than PyTorch's. This script times the contenders ``runtime_check`` times (plain autograd,
memplan's store-all, memplan's ``sequential``(k), ``checkpoint_sequential``(k)) in rotating rounds,
each sample several steps back to back between two synchronizes, and records for every sample:

- ``wall``: the sample's seconds per step (as ``runtime_check``);
- ``step_gpu_ms``: each step's time between CUDA events recorded before and after it (no synchronize
  between steps), so a sample slowed by one step is told from one slowed throughout;
- ``host_ms``: when each step's Python call returned (seconds from the sample's start): a host that
  returns late, near the step's end, is what the GPU waited for;
- ``gc``: the garbage collections during the sample (``gc.callbacks``: count per generation, seconds);
- memplan's plans run as ``runtime_check`` times them (since 2026-11-28): a fused group's a^j and
  delta^j held until B^j ends only for the B's at the peak of a held measured run
  (:func:`memplan.models.runtime.holds_at_peak`: the same peak, two hooks per such B); the same
  store-all and the largest k's ``sequential`` also with every B held (``all held``, the Python hook
  per junction: about 5-10 us a stage on a CPU) and with none (``hold=False``), to see how much of
  the host's time, and of the gap to PyTorch, the hooks are;
- the caching allocator's counters over the sample (``torch.cuda.memory_stats``: ``num_alloc_retries``
  (a full free-and-retry, which synchronizes), ``num_device_alloc``/``num_device_free``
  (``cudaMalloc``/``cudaFree``), ``num_sync_all_streams``).

The summary names, per contender, the samples over ``--slow`` times its fastest and what they had in
common. On a CPU (a dry run) the events and the allocator's counters are left out.

    python benchmarks/gpu_step_spikes.py --device cuda --out spikes.csv          # ResNet-50 b32, k = 4, 8
    python benchmarks/gpu_step_spikes.py --device cpu --network resnet18 --batch 2 --size 32 --rounds 4
"""
from __future__ import annotations

import argparse
import csv
import gc
import statistics
import sys
import time
from pathlib import Path

ALLOC_KEYS = ("num_alloc_retries", "num_device_alloc", "num_device_free", "num_sync_all_streams",
              "segment.all.allocated")


class GcWatch:
    """Collections (per generation) and their seconds while active, from ``gc.callbacks``."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.seconds = 0.0
        self._t = None

    def __call__(self, phase, info) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        elif self._t is not None:
            self.seconds += time.perf_counter() - self._t
            self.counts[info.get("generation", 0)] += 1
            self._t = None

    def reset(self) -> None:
        self.counts, self.seconds, self._t = [0, 0, 0], 0.0, None


def summarize(rows: list[dict], slow: float = 1.1) -> list[str]:
    """Per contender: the median and fastest sample, and of the samples over ``slow`` times the fastest,
    how many had a collection of generation 2 or any, an allocator retry or a device allocation, one step
    much slower than the sample's others (one disturbed step), or a host that returned its last step
    within 10% of the sample's end (the GPU waited for the host)."""
    out = []
    for c in dict.fromkeys(r["contender"] for r in rows):
        rs = [r for r in rows if r["contender"] == c]
        walls = [r["wall"] for r in rs]
        fast = min(walls)
        bad = [r for r in rs if r["wall"] > slow * fast]
        line = (f"{c:26s} median {statistics.median(walls) * 1e3:8.3f} ms, fastest {fast * 1e3:8.3f} ms; "
                f"{len(bad)} of {len(rs)} samples over {slow:g}x the fastest")
        if bad:
            def share(pred) -> str:
                return f"{sum(1 for r in bad if pred(r))}/{len(bad)}"
            line += (f": gc gen2 {share(lambda r: r['gc_gen2'] > 0)}, any gc {share(lambda r: r['gc_n'] > 0)}, "
                     f"allocator retry {share(lambda r: (r.get('num_alloc_retries') or 0) > 0)}, "
                     f"cudaMalloc {share(lambda r: (r.get('num_device_alloc') or 0) > 0)}, "
                     f"one step >1.5x the sample's median step {share(lambda r: r['one_step_slow'])}, "
                     f"host late {share(lambda r: r['host_late'])}")
            line += f"; their mean excess {statistics.mean(r['wall'] / fast - 1 for r in bad):+.1%}"
        out.append(line)
    return out


def paired_lines(rows: list[dict], pairs: list[tuple[str, str]]) -> list[str]:
    """Each pair's time ratio, round by round (:func:`memplan.models.measure.paired_ratio`)."""
    from memplan.models.measure import paired_ratio

    by: dict[str, dict[int, float]] = {}
    for r in rows:
        by.setdefault(r["contender"], {})[r["round"]] = r["wall"]
    out = ["paired round by round (median of the per-round ratios, 95% interval):"]
    for num, den in pairs:
        if num in by and den in by:
            common = sorted(set(by[num]) & set(by[den]))
            if common:
                r = paired_ratio([by[num][i] for i in common], [by[den][i] for i in common])
                out.append(f"  {num + ' / ' + den:50s} {r.text()}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--network", default="resnet50")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--segments", default="4,8", help="segment counts of sequential and checkpoint_sequential")
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--steps", type=int, default=4, help="steps per sample, back to back (runtime_check: 4 here)")
    p.add_argument("--slow", type=float, default=1.1)
    p.add_argument("--budget", type=float, default=120.0, help="seconds of rounds at most")
    p.add_argument("--out", default=None, help="CSV, one row per sample")
    a = p.parse_args(argv)
    try:
        segs = [int(s) for s in a.segments.split(",") if s.strip()]
    except ValueError:
        print(f"gpu_step_spikes: --segments {a.segments!r}: give whole numbers separated by commas, e.g. 4,8",
              file=sys.stderr)
        return 2
    if a.rounds < 1 or a.steps < 1 or not segs or min(segs) < 2:
        print("gpu_step_spikes: --rounds and --steps must be at least 1 and --segments at least 2", file=sys.stderr)
        return 2
    import torch
    from torch.utils.checkpoint import checkpoint_sequential

    from memplan.baselines.remat_heuristics import sequential_schedule
    from memplan.experiments.cli_checks import device_problem
    from memplan.experiments.runtime_check import set_deterministic
    from memplan.models.graph import linearize_model
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss
    from memplan.models.runtime import execute, holds_at_peak, store_all_ops

    why = device_problem(a.device)
    if why:
        print(f"gpu_step_spikes: {why}", file=sys.stderr)
        return 2
    cuda = a.device.startswith("cuda")
    if not cuda:
        torch.set_num_threads(1)
    det = set_deterministic(a.device)
    torch.manual_seed(0)
    model = get_model(a.network).to(a.device).train()
    shape = (3, a.size, a.size) if a.network not in ("gpt2", "llama") else (a.size,)
    x = example_input(a.network, a.batch, shape, device=a.device)
    loss_fn = classification_loss()
    lm = linearize_model(model, x, loss_fn)
    stages, loss_stage = lm.stages, lm.loss_stage(loss_fn)
    L = len(stages)
    segs = [k for k in segs if k <= L]
    params = list(model.parameters())
    seqmod = torch.nn.Sequential(*stages)
    reentrant = x.is_floating_point()

    def leaf():
        xi = x.detach().clone()
        return xi.requires_grad_(True) if xi.is_floating_point() else xi

    def autograd_step():
        loss_fn(model(leaf())).backward()

    def plan_step(ops, hold=None):
        if hold is None:                  # held at the peak of a held measured run, as runtime_check times it
            for q in params:
                q.grad = torch.zeros_like(q)
            res = execute(stages, loss_stage, x, ops, device=a.device, measure_memory=True)
            hold = holds_at_peak(ops, res.memory_peak_during, device=a.device)
        return lambda: execute(stages, loss_stage, x, ops, device=a.device, sync=False, hold=hold)

    def ck_step(k):
        return lambda: loss_stage(checkpoint_sequential(seqmod, k, leaf(), use_reentrant=reentrant)).backward()

    contenders = {"autograd": autograd_step, "store-all": plan_step(store_all_ops(L))}
    for k in segs:
        contenders[f"sequential:{k}"] = plan_step(sequential_schedule(L, k))
        contenders[f"checkpoint_sequential:{k}"] = ck_step(k)
    # every B held, and none (execute(hold=False)): how much of the gap to PyTorch the hooks are
    contenders["store-all all held"] = plan_step(store_all_ops(L), hold=True)
    contenders["store-all hold=False"] = plan_step(store_all_ops(L), hold=False)
    contenders[f"sequential:{max(segs)} all held"] = plan_step(sequential_schedule(L, max(segs)), hold=True)
    contenders[f"sequential:{max(segs)} hold=False"] = plan_step(sequential_schedule(L, max(segs)), hold=False)

    def sync():
        if cuda:
            torch.cuda.synchronize(a.device)

    def stats() -> dict:
        if not cuda:
            return {}
        s = torch.cuda.memory_stats(a.device)
        return {k: s.get(k, 0) for k in ALLOC_KEYS}

    watch = GcWatch()
    gc.callbacks.append(watch)
    rows: list[dict] = []
    names = list(contenders)
    t_start = time.perf_counter()
    try:
        for fn in contenders.values():          # warm-up: kernels chosen, allocator's blocks cached
            for _ in range(2):
                for q in params:
                    q.grad = None
                fn()
        sync()
        for rnd in range(a.rounds):
            if rnd and time.perf_counter() - t_start > a.budget:
                break
            k0 = rnd % len(names)
            for name in names[k0:] + names[:k0]:
                fn = contenders[name]
                for q in params:
                    q.grad = None
                before = stats()
                sync()
                watch.reset()
                events = [torch.cuda.Event(enable_timing=True) for _ in range(a.steps + 1)] if cuda else []
                host = []
                t0 = time.perf_counter()
                if cuda:
                    events[0].record()
                for i in range(a.steps):
                    fn()
                    if cuda:
                        events[i + 1].record()
                    host.append(time.perf_counter() - t0)
                sync()
                total = time.perf_counter() - t0
                after = stats()
                if cuda:
                    steps_ms = [events[i].elapsed_time(events[i + 1]) for i in range(a.steps)]
                else:
                    steps_ms = [(host[i] - (host[i - 1] if i else 0.0)) * 1e3 for i in range(a.steps)]
                med_step = statistics.median(steps_ms)
                row = {"round": rnd, "contender": name, "wall": total / a.steps,
                       "step_gpu_ms": " ".join(f"{v:.3f}" for v in steps_ms),
                       "host_ms": " ".join(f"{v * 1e3:.3f}" for v in host),
                       "one_step_slow": max(steps_ms) > 1.5 * med_step,
                       "host_late": host[-1] >= 0.9 * total,
                       "gc_n": sum(watch.counts), "gc_gen2": watch.counts[2], "gc_ms": watch.seconds * 1e3,
                       **{k: after[k] - before[k] for k in after}}
                rows.append(row)
    finally:
        gc.callbacks.remove(watch)
    lines = [f"gpu_step_spikes: {a.network} batch {a.batch} on {a.device} ({det}), {L} stages, "
             f"{len({r['round'] for r in rows})} rounds of {a.steps} steps per sample"] + summarize(rows, a.slow)
    lines += paired_lines(rows, [("store-all", "autograd"), ("store-all all held", "autograd"),
                                 ("store-all hold=False", "autograd")]
                          + [(f"sequential:{k}", f"checkpoint_sequential:{k}") for k in segs]
                          + [(f"sequential:{max(segs)} all held", f"checkpoint_sequential:{max(segs)}"),
                             (f"sequential:{max(segs)} hold=False", f"checkpoint_sequential:{max(segs)}")])
    print("\n".join(lines))
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        cols = list(dict.fromkeys(k for r in rows for k in r))
        with open(a.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            w.writerows(rows)
        Path(a.out).with_suffix(".txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
