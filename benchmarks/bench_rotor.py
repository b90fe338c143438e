"""Run time of the rotor DPs (paper 004, section 5.3 / Figure 5), side by side with Rotor's C code.

1. Persistent DP (Algorithm 3) against the C implementation of the same DP in Rotor / Rockmate (the
   ``RkTable`` solver, ``solver.c`` of rockmate 2.0.0), on the same random chains (L = 50, 100, 200,
   339 = ResNet-1001's chain length), 500 slots and the same budget: both optimal values (equal up
   to the floating-point order of the sums) and the time ratio. Target of issue 21: at least 10x
   faster than the C code at L = 339.
2. Floating DP (Algorithm 1) on ResNet-101's chain (``instances/resnet101-b8-224-cpu.json``,
   L = 73; a random 73-stage chain when the file is missing) at 500 slots and a memory limit halfway
   between the minimum feasible memory and store-all's peak: seconds and peak RSS of a fresh
   process. Target of issue 21: within 60 s and 4 GB.

The C code is not part of memplan: it is fetched with ``pip download rockmate==2.0.0 --no-deps
--no-binary :all:`` into ``~/.cache/memplan-bench`` (or ``$MEMPLAN_BENCH_CACHE``), its
``solver.c`` compiled there with the system compiler (``cc -O3``, as its own setup.py does) into a
Python extension and loaded with importlib (its module init imports ``csequence``, which we stub:
only ``get_opt``, the value, is used). Skipped with a message when pip, the network or a compiler
is missing.

Mapping a memplan chain to Rockmate's inputs (stage i of Rockmate = stage i+1 of memplan, ``ln = L``
with the loss as stage ``ln``; sizes in slots): ``cw[i] = wa[i]`` (and ``wd = wa``),
``cbw[i+1] = wabar[i+1]``, ``ff_fwd_tmp[i] = of[i+1]`` (F_ck / F_none), ``fwd_tmp[i] = 0``,
``bwd_tmp[i] = wa[i+1] + ob[i+1]``, ``ff_fw[i] = fw[i] = uf[i+1]``, ``bw[i] = ub[i+1]``, one option
per stage. The two DPs then check the same memory of every operation but one: Rockmate checks
``F_all^s`` against ``wa^s + wabar^s + o_f^s`` where memplan counts the gradient ``delta^t`` held
meanwhile (``wd^t + wabar^s + o_f^s``). The benchmark chains are therefore the random chains snapped
to the slot grid with ``o_b^s`` raised so that this forward check never binds
(``o_b^s >= o_f^s + max_{t >= s} wa^t - wa^s - wa^{s-1}``); on them the two recurrences coincide and
so do the optimal values (checked below).

Times: wall seconds and CPU seconds of the process (``time.process_time``); on a shared machine the
wall time of a single-threaded run is inflated by the other jobs, the CPU time much less, so the
ratios are printed for both. The memplan time is one DP run with the sequence rebuilt (``_dp``); the
C time is one ``RkTable`` built and solved (value only). ``persistent(slots=500)`` itself runs the DP
twice (sizes rounded up for the plan, down for the bound).

    python benchmarks/bench_rotor.py [--quick] [--no-c] [--skip-floating] [--sizes 339] [--repeat 5]
"""
from __future__ import annotations

import argparse
from memplan.experiments.cli_checks import OneLineParser, guarded
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import types
from pathlib import Path

import numpy as np

from memplan.baselines import remat_heuristics as H
from memplan.baselines import remat_rotor as rotor
from memplan.models.chain import Chain, random_chain

ROCKMATE = "rockmate==2.0.0"
SOLVER = "rockmate-2.0.0/src/rockmate/solvers/rk_rotor/solver.c"
CACHE = Path(os.environ.get("MEMPLAN_BENCH_CACHE", Path.home() / ".cache" / "memplan-bench"))
MODULE = "rockmate.solvers.rk_rotor.csolver"
RESNET101 = Path(__file__).resolve().parent.parent / "instances" / "resnet101-b8-224-cpu.json"


# ----------------------------------------------------------------------------- Rotor's C DP
def load_rotor_c():
    """Rockmate's compiled ``csolver`` module, or a string saying why it is not available."""
    CACHE.mkdir(parents=True, exist_ok=True)
    src = CACHE / SOLVER
    if not src.exists():
        tar = CACHE / "rockmate-2.0.0.tar.gz"
        if not tar.exists():
            r = subprocess.run([sys.executable, "-m", "pip", "download", ROCKMATE, "--no-deps", "--no-binary",
                                ":all:", "-d", str(CACHE)], capture_output=True, text=True, timeout=300)
            if r.returncode != 0 or not tar.exists():
                return f"pip download {ROCKMATE} failed (no network?): {r.stderr.strip()[-200:]}"
        r = subprocess.run(["tar", "xzf", str(tar), "-C", str(CACHE), SOLVER], capture_output=True, text=True)
        if r.returncode != 0:
            return f"could not unpack {tar}: {r.stderr.strip()}"
    so = CACHE / "rockmate_csolver.so"
    if not so.exists() or so.stat().st_mtime < src.stat().st_mtime:
        cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
        if cc is None:
            return "no C compiler (cc / gcc) on this machine"
        inc = sysconfig.get_paths()["include"]
        r = subprocess.run([cc, "-O3", "-std=c99", "-shared", "-fPIC", "-I", inc, str(src), "-o", str(so)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return f"compiling {src} failed: {r.stderr.strip()[-300:]}"
    # the module init imports rockmate.solvers.rk_rotor.csequence (sequence builders): stubs
    for name in ("rockmate", "rockmate.solvers", "rockmate.solvers.rk_rotor", "rockmate.solvers.rk_rotor.csequence"):
        if name not in sys.modules:
            mod = types.ModuleType(name)
            mod.__path__ = []
            sys.modules[name] = mod
    seq = sys.modules["rockmate.solvers.rk_rotor.csequence"]
    for f in ("SeqLoss", "SeqBlockFe", "SeqBlockFn", "SeqBlockFc", "SeqBlockBwd"):
        setattr(seq, f, lambda *a, _f=f: (_f, *a))
    loader = importlib.machinery.ExtensionFileLoader(MODULE, str(so))
    spec = importlib.util.spec_from_file_location(MODULE, str(so), loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def grid_chain(chain: Chain, memory: float, slots: int) -> Chain:
    """``chain`` with sizes snapped to the slots of ``memory / slots`` bytes (rounded up, as the DP
    does) and ``o_b`` raised so that F_all's forward memory check never binds (module docstring)."""
    disc = rotor.Discretization(chain, memory, slots)
    # one forward overhead, the larger of the two (Rockmate's model has one for F_ck/F_none)
    wa, of, ob = (x.astype(float) for x in (disc.wa, np.maximum(disc.ofa, disc.ofn), disc.ob))
    for s in range(1, chain.L + 2):
        ob[s] = max(ob[s], of[s] + wa[s:].max() - wa[s] - wa[s - 1])
    q = disc.q
    return Chain(uf=chain.uf, ub=chain.ub, wa=wa * q, wabar=disc.wab.astype(float) * q, wd=wa * q, of=of * q,
                 ob=ob * q, weights=chain.weights, name=chain.name + "-grid")


def rockmate_chain(chain: Chain, disc: rotor.Discretization) -> types.SimpleNamespace:
    """Rockmate's ``RkChain`` attributes for ``chain`` discretized by ``disc`` (module docstring)."""
    ln = chain.L
    A, B, of, ob = (x.astype(int).tolist() for x in (disc.wa, disc.wab, np.maximum(disc.ofa, disc.ofn), disc.ob))
    uf, ub = chain.uf.tolist(), chain.ub.tolist()
    return types.SimpleNamespace(
        ln=ln, nb_sol=[1] * (ln + 1),
        fw=[[uf[i + 1]] for i in range(ln + 1)], bw=[[ub[i + 1]] for i in range(ln + 1)],
        cw=[A[i] for i in range(ln + 2)], cbw=[[0]] + [[B[i]] for i in range(1, ln + 2)],
        fwd_tmp=[[0] for _ in range(ln + 1)], bwd_tmp=[[A[i + 1] + ob[i + 1]] for i in range(ln + 1)],
        ff_fwd_tmp=[of[i + 1] for i in range(ln + 1)], ff_fw=[uf[i + 1] for i in range(ln + 1)])


def _clock():
    return time.perf_counter(), time.process_time()


def _since(t):
    w, c = _clock()
    return w - t[0], c - t[1]


def bench_persistent(sizes, slots: int, csolver, repeat: int = 1) -> None:
    print(f"persistent DP, {slots} slots, one solver thread "
          f"(NUMBA_NUM_THREADS={os.environ.get('NUMBA_NUM_THREADS', 'unset')}); wall / CPU seconds"
          + (f"; {repeat} runs each, alternated, ratios of run i to run i" if repeat > 1 else ""))
    print(f"{'L':>5}{'memplan':>16}{'Rotor C':>18}{'ratio wall':>12}{'ratio CPU':>11}  values (memplan, C)")
    last = None
    for L in sizes:
        c0 = random_chain(L, seed=L, integer=False)
        M = (rotor.min_memory(c0) + H.store_all(c0).peak_memory) / 2
        c = grid_chain(c0, M, slots)
        ratios = []
        for _ in range(repeat):
            t = _clock()
            value, ops, disc = rotor._dp(c, M, "persistent", slots, False, "up")
            tm = _since(t)
            budget = disc.budget - int(disc.wa[0])
            line = f"{L:>5}{tm[0]:>8.2f}/{tm[1]:<7.2f}"
            if isinstance(csolver, str):
                print(line + f"{'-':>18}  {value:.9g}")
                continue
            t = _clock()
            table = csolver.RkTable(rockmate_chain(c, disc), budget)
            cv = table.get_opt(budget)
            tc = _since(t)
            del table
            same = value is not None and abs(value - cv) <= 1e-9 * abs(cv)
            print(line + f"{tc[0]:>9.2f}/{tc[1]:<8.2f}{tc[0] / tm[0]:>12.2f}{tc[1] / tm[1]:>11.2f}  "
                  f"{value:.12g} {cv:.12g} {'same' if same else 'DIFFERENT'}", flush=True)
            ratios.append((tc[0] / tm[0], tc[1] / tm[1]))
        if ratios:
            rw = sorted(r[0] for r in ratios)
            rc = sorted(r[1] for r in ratios)
            if repeat > 1:
                print(f"{'':>5}ratios over {repeat} runs: wall min {rw[0]:.1f} median {rw[len(rw) // 2]:.1f} max "
                      f"{rw[-1]:.1f}; CPU min {rc[0]:.1f} median {rc[len(rc) // 2]:.1f} max {rc[-1]:.1f}")
            last = (L, rw[len(rw) // 2], rc[len(rc) // 2], rc[0])
    if last is not None:
        L, rw, rc, rcmin = last
        what = "median " if repeat > 1 else ""
        print(f"target (issue 21): >= 10x faster than Rotor's C DP at L = 339: L = {L}: {what}{rw:.1f}x wall, "
              f"{what}{rc:.1f}x CPU" + (f" (lowest CPU ratio {rcmin:.1f}x)" if repeat > 1 else "")
              + f" -> {'met' if min(rw, rc) >= 10 else 'met on CPU time' if rc >= 10 else 'not met'}")


def _floating_child(path: str, slots: int) -> None:
    """Run in a fresh process: the floating DP on the chain of ``path`` (or a random 73-stage chain)."""
    import resource

    from memplan.models.instance import load_instance
    if path and Path(path).exists():
        chain, _ = load_instance(path)
    else:
        chain = random_chain(73, 73, integer=False)
    warm = random_chain(4, 0, integer=False)
    rotor.floating(warm, H.store_all(warm).peak_memory, slots=20)    # compile (or load) the kernel
    M = (rotor.min_memory(chain) + H.store_all(chain).peak_memory) / 2
    t = _clock()
    sol = rotor.floating(chain, M, slots=slots)
    w, c = _since(t)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024    # Linux: KiB
    print(json.dumps({"chain": chain.name, "L": chain.L, "memory": M, "wall": w, "cpu": c, "rss": rss,
                      "status": str(sol.status), "objective": sol.objective,
                      "tables": rotor.floating_table_bytes(chain.L, slots),
                      "dense_tables": 5.0 * (chain.L + 2) ** 3 * (slots + 1) * 8}))


def bench_floating(slots: int) -> None:
    path = str(RESNET101) if RESNET101.exists() else ""
    r = subprocess.run([sys.executable, __file__, "--floating-child", path, "--slots", str(slots)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"floating DP failed: {r.stderr.strip()[-500:]}")
        return
    d = json.loads(r.stdout.strip().splitlines()[-1])
    src = "ResNet-101 (" + RESNET101.name + ")" if path else "random chain (ResNet-101 instance missing)"
    print(f"floating DP, {src}, L = {d['L']}, {slots} slots, limit {d['memory'] / 2**30:.3f} GiB "
          f"(halfway between minimum memory and store-all)")
    print(f"  rotor.floating(slots={slots}) (two DP runs: plan and bound): {d['wall']:.1f} s wall, "
          f"{d['cpu']:.1f} s CPU, peak RSS {d['rss'] / 1e9:.2f} GB; tables {d['tables'] / 1e9:.2f} GB "
          f"(dense layout: {d['dense_tables'] / 1e9:.1f} GB); {d['status']}, makespan {d['objective']:.6g} s")
    ok = d["wall"] <= 60 and d["rss"] <= 4e9
    print(f"target (issue 21): within 60 s and 4 GB -> {'met' if ok else 'not met'}"
          + ("" if d["wall"] <= 60 or d["cpu"] > 60 else " (met on CPU time)"))


def main() -> None:
    ap = OneLineParser(name='bench_rotor', )
    ap.add_argument("--quick", action="store_true", help="smaller sizes (smoke run)")
    ap.add_argument("--no-c", action="store_true", help="skip Rotor's C code")
    ap.add_argument("--skip-floating", action="store_true")
    ap.add_argument("--floating-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--slots", type=int, default=500)
    ap.add_argument("--sizes", default=None, help="chain lengths of the persistent DP, e.g. 339 (default "
                    "50,100,200,339)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each side per length (ratios: median and spread)")
    args = ap.parse_args()
    if args.floating_child is not None:
        _floating_child(args.floating_child, args.slots)
        return
    warm = random_chain(5, 0, integer=False)
    rotor.persistent(warm, H.store_all(warm).peak_memory, slots=50)    # compile numba kernels
    csolver = "skipped (--no-c)" if args.no_c else load_rotor_c()
    if isinstance(csolver, str):
        print(f"Rotor's C DP not run: {csolver}")
    sizes = (50, 100) if args.quick else (50, 100, 200, 339)
    if args.sizes:
        sizes = tuple(int(x) for x in args.sizes.split(","))
    bench_persistent(sizes, args.slots, csolver, max(1, args.repeat))
    if not args.skip_floating:
        print()
        bench_floating(100 if args.quick else args.slots)


if __name__ == "__main__":
    sys.exit(guarded(main, 'bench_rotor'))    # bad input: one line, exit 2
