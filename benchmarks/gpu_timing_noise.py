"""Where the spread of a short GPU step's time comes from (issue 27: ResNet-50 at batch 32 measured
18.5-28 ms on an H100 for one compiled step, while GPT-2 small's 171 ms steps were within 0.3%).

One plain autograd step of a zoo network is run ``--runs`` times in each of these ways, and every run's
numbers are kept:

- ``wall``: ``time.perf_counter`` between ``torch.cuda.synchronize`` calls, as ``runtime_check`` and
  ``bench_budget`` time a step;
- ``launch``: the CPU seconds until ``backward()`` returns, before the synchronize: the time Python and
  the dispatcher take to queue the step's kernels. When it is close to ``wall`` the step is bound by
  the CPU, and the CPU's jitter is the step's;
- ``events``: CUDA events recorded before and after the step (the GPU's own clock, idle gaps included);
- ``batched``: the mean of ``--batch-steps`` steps queued back to back between two synchronizes (one
  synchronize's latency shared by several steps);
- the same ``wall`` under ``torch.use_deterministic_algorithms(True)`` with cuDNN deterministic, as
  ``runtime_check`` runs by default (``det``).

nvidia-smi's clocks, power and temperature are read before and after, with the CPU's model and load.
On a CPU (a dry run) the events are skipped.

    python benchmarks/gpu_timing_noise.py --device cuda --out timing_noise.csv
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _smi() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,"
                               "utilization.gpu,clocks_throttle_reasons.active", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "nvidia-smi not available"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _spread(v: list[float]) -> str:
    q = statistics.quantiles(v, n=20, method="inclusive") if len(v) >= 2 else [v[0]] * 19
    med = statistics.median(v)
    return (f"median {med * 1e3:8.3f} ms  min {min(v) * 1e3:8.3f}  p5 {q[0] * 1e3:8.3f}  p95 {q[-1] * 1e3:8.3f}  "
            f"max {max(v) * 1e3:8.3f}  (p95-p5)/median {(q[-1] - q[0]) / med:6.1%}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--network", default="resnet50", help="a zoo network (default resnet50)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--size", type=int, default=224, help="image side (default 224)")
    p.add_argument("--runs", type=int, default=60)
    p.add_argument("--batch-steps", type=int, default=5)
    p.add_argument("--out", default=None, help="CSV of every run (mode, run, seconds)")
    a = p.parse_args(argv)
    import torch

    from memplan.experiments.cli_checks import device_problem
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss

    why = device_problem(a.device)
    if why:
        print(f"gpu_timing_noise: {why}", file=sys.stderr)
        return 2
    cuda = a.device.startswith("cuda")
    if a.runs < 2 or a.batch_steps < 1 or a.batch < 1 or a.size < 32:
        print("gpu_timing_noise: --runs >= 2, --batch-steps >= 1, --batch >= 1 and --size >= 32", file=sys.stderr)
        return 2
    dev = torch.device(a.device)
    torch.manual_seed(0)
    model = get_model(a.network).to(dev).train()
    x = example_input(a.network, a.batch, (3, a.size, a.size), device=dev)
    loss_fn = classification_loss()

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    def step():
        for q in model.parameters():
            q.grad = None
        loss_fn(model(x)).backward()

    for _ in range(5):
        step()
    sync()
    rows: list[tuple[str, int, float]] = []
    print(f"{a.network} b{a.batch} {a.size}x{a.size} on {torch.cuda.get_device_name(dev) if cuda else a.device}; "
          f"torch {torch.__version__}; CPU {_cpu_model()}, {os.cpu_count()} cores, load {os.getloadavg()}; "
          f"torch threads {torch.get_num_threads()}")
    print(f"nvidia-smi before (sm MHz, mem MHz, W, C, util, throttle): {_smi()}")

    def run_modes(suffix: str) -> None:
        for i in range(a.runs):
            sync()
            t0 = time.perf_counter()
            if cuda:
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
            step()
            t1 = time.perf_counter()
            if cuda:
                e1.record()
            sync()
            t2 = time.perf_counter()
            rows.append((f"wall{suffix}", i, t2 - t0))
            rows.append((f"launch{suffix}", i, t1 - t0))
            if cuda:
                rows.append((f"events{suffix}", i, e0.elapsed_time(e1) / 1e3))
        for i in range(max(2, a.runs // a.batch_steps)):
            sync()
            t0 = time.perf_counter()
            for _ in range(a.batch_steps):
                step()
            sync()
            rows.append((f"batched{suffix}", i, (time.perf_counter() - t0) / a.batch_steps))

    run_modes("")
    print(f"nvidia-smi after the default runs: {_smi()}")
    torch.use_deterministic_algorithms(True, warn_only=True)
    prev = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        step()
        sync()
        run_modes("-det")
    finally:
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = prev
    print(f"nvidia-smi after: {_smi()}; load {os.getloadavg()}")
    for mode in dict.fromkeys(m for m, _, _ in rows):
        v = [t for m, _, t in rows if m == mode]
        print(f"  {mode:13s} n={len(v):3d}  {_spread(v)}")
    wall = [t for m, _, t in rows if m == "wall"]
    launch = [t for m, _, t in rows if m == "launch"]
    print(f"  launch / wall (median): {statistics.median(launch) / statistics.median(wall):.2f} "
          f"(near 1: the step waits on the CPU; well below 1: on the GPU); correlation of launch and wall: "
          f"{statistics.correlation(launch, wall) if len(set(launch)) > 1 and len(set(wall)) > 1 else float('nan'):.2f}")
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        with open(a.out, "w") as f:
            f.write("mode,run,seconds\n")
            f.writelines(f"{m},{i},{t:.9f}\n" for m, i, t in rows)
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
