"""Long chains (issue 29, defect 1): every phase of a remat solve fits in the call's time limit and in
memory, on chains of 1000 and 5000 stages built by repeating the toy chain's six layers.

Before issue 29 the default method allocated seven (L+2)^3 tables for the least memory (killed at
23.6 GB on 1000 stages) and ran L simulations of L operations for ``sequential``; these tests would
time out."""
from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from memplan import remat
from memplan.baselines import remat_heuristics as H
from memplan.baselines import remat_min_memory as MM
from memplan.models.chain import Chain, random_chain
from memplan.models.instance import load_chain
from memplan.models.remat import simulate_remat
from memplan.models.solution import Status

MiB = 2**20


def write_instance(L: int, path) -> None:
    """Paper 004's toy chain with its six layers repeated to L stages (the issue's chain1000.json)."""
    src = json.loads((ROOT / "instances" / "paper004_table2.json").read_text())
    layers = src["stages"][1:-1]
    rows = [src["stages"][0]]
    for i in range(L):
        r = dict(layers[i % len(layers)], stage=i + 1)
        r.pop("name", None)
        rows.append(r)
    rows.append(dict(src["stages"][-1], stage=L + 1))
    src.update(name=f"chain{L}", stages=rows)
    path.write_text(json.dumps(src))


def repeated_toy(L: int, tmp_path) -> Chain:
    path = tmp_path / f"chain{L}.json"
    write_instance(L, path)
    return load_chain(path)


def test_compiled_replay_equals_the_simulator():
    """sequential_points, recompute-all and bisection evaluated by the compiled replay give exactly the
    simulator's makespan and peak (same arithmetic, same order) on random chains."""
    for seed in range(12):
        for integer in (True, False):
            c = random_chain(2 + seed % 9, seed=seed, integer=integer)
            for s, mk, pk in H.sequential_points(c):
                rep = simulate_remat(c, H.sequential_schedule(c, s))
                assert (mk, pk) == (rep.makespan, rep.peak_memory)
            rep = simulate_remat(c, H.recompute_all_schedule(c))
            assert H.recompute_all_stats(c) == (rep.makespan, rep.peak_memory)
            assert len(H.recompute_all_schedule(c)) == H.recompute_all_ops(c.L)
            for leaf in (1, 2, 3, c.L + 1):
                sched = H.bisection_schedule(c, leaf)
                rep = simulate_remat(c, sched)              # valid: the simulator raises otherwise
                assert H.schedule_stats(c, sched) == (rep.makespan, rep.peak_memory)


def test_bisection_with_leaves_is_store_all_at_the_top_and_fits_the_class():
    c = random_chain(9, seed=3)
    assert H.bisection_schedule(c, c.L + 1).ops == H.store_all_schedule(c).ops
    # revolve's class (F_all^l right before B^l) only takes leaf = 1
    sol = remat.solve(c, memory=float(H.recompute_all(c).peak_memory) * 1.5, method="revolve", time_limit=20)
    ops = sol.schedule.ops
    assert all(ops[i + 1] == ("B", l) for i, (o, l) in enumerate(ops) if o == "F_all")


def test_least_memory_of_long_chains_is_bounded_and_reached(tmp_path):
    """Above FLOATING_MAX_L the class "all" takes the persistent class's sequence: its replayed peak is
    the value, and the proven lower bound is below it; a short time limit refuses before starting."""
    c = repeated_toy(MM.FLOATING_MAX_L + 30, tmp_path)
    with pytest.raises(MM.TooCostly):
        MM.min_memory_of(c, "all", time_limit=1e-6)
    t0 = time.perf_counter()
    mm = MM.min_memory_of(c, "all", time_limit=30)
    assert time.perf_counter() - t0 < 10
    assert mm.value == simulate_remat(c, mm.schedule).peak_memory
    assert mm.value == MM.min_memory_of(c, "persistent").value
    low = MM.necessary_memory(c)
    assert low <= mm.value * (1 + 1e-12)
    assert MM.proven_infeasible_below(c) == (mm.value if mm.exact else low)
    # below the proven bound the solve says infeasible and names it
    sol = remat.solve(c, memory=low * 0.99, time_limit=10)
    assert sol.status == Status.INFEASIBLE and sol.details["min_memory"] <= low * (1 + 1e-12)


def test_1000_stages_answer_within_the_time_limit_and_4GB(tmp_path):
    """The issue's command (1000 stages, 500 MiB, rotor; --time-limit 3 here instead of 5, to keep the
    suite short): an answer within the limit + 10% (the call's own time; the process start is measured
    apart) and under 4 GB."""
    inst = tmp_path / "chain1000.json"
    write_instance(1000, inst)
    chain = load_chain(inst)
    out = tmp_path / "sol.json"
    rss = tmp_path / "maxrss"
    # the CLI run in a process that reports its own peak resident size, VmHWM of /proc/self/status (kB):
    # the peak of its own address space. RUSAGE_CHILDREN would be the largest of every child this test
    # worker has waited for, and even RUSAGE_SELF's ru_maxrss starts from the forking worker's resident
    # size, which Linux carries across fork and exec (a worker at 4.03 GB after the torch tests failed a
    # fresh clone's run; the CLI alone peaks near 0.2 GB)
    code = ("import sys; from memplan.experiments.cli import main; rc = main(sys.argv[1:]); "
            "hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]; "
            f"open({str(rss)!r}, 'w').write(hwm); sys.exit(rc)")
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", code, "solve", str(inst), "--memory", "500MiB",
                        "--method", "rotor", "--time-limit", "3", "--json", str(out), "-q"],
                       capture_output=True, text=True, timeout=60)
    wall = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr[-2000:]
    rss_gb = int(rss.read_text()) * 1024 / 1e9          # VmHWM: kB (KiB)
    assert 0.05 < rss_gb < 4.0
    data = json.loads(out.read_text())
    assert data["status"] in ("feasible", "optimal")
    assert data["times"]["total"] <= 3 * 1.1
    assert wall < 3 * 1.1 + 10          # the process start (imports, numba cache) is not the call's
    assert data["peak_memory"] <= 500 * MiB
    sched = [tuple(op) for op in data["schedule"]]
    rep = simulate_remat(chain, sched, memory_limit=500 * MiB)
    assert rep.makespan == pytest.approx(data["objective"], rel=1e-9)
    # far better than recompute-all (its makespan is quadratic: about 1000 s here)
    assert data["objective"] < H.recompute_all_stats(chain)[0] / 20


@pytest.mark.parametrize("method", ["rotor", "sequential"])
def test_5000_stages_answer_within_the_time_limit(method, tmp_path):
    """5000 stages, 3 s: an answer (or a clear NO_SOLUTION) within the limit + 10%, for every method
    that scales; the schedule replays within the limit."""
    chain = repeated_toy(5000, tmp_path)
    t0 = time.perf_counter()
    sol = remat.solve(chain, memory="500MiB", method=method, time_limit=3)
    dt = time.perf_counter() - t0
    assert dt <= 3 * 1.1 + 0.5, f"{method} took {dt:.2f} s"
    if method == "sequential":      # its least-memory cut needs about 1.4 GiB here
        assert sol.status == Status.NO_SOLUTION and "sequential needs" in sol.message
        return
    assert sol.status == Status.FEASIBLE and sol.peak_memory <= 500 * MiB
    assert "not run in the time limit" in sol.message


def test_milps_and_recompute_all_refuse_what_cannot_fit_the_limit(tmp_path):
    """A MILP whose model alone would take longer to build than the limit, and recompute-all's
    quadratic sequence, answer at once and say what limit would work; Checkmate's methods then return
    the fastest baseline that fits, status time_limit (the baselines' own answers: the best
    ``checkpoint_sequential`` cut, bisection; store-all and recompute-all do not fit)."""
    chain = repeated_toy(400, tmp_path)
    fits = [s.objective for s in (H.sequential(chain, 500 * MiB), H.store_all(chain, 500 * MiB),
                                  H.recompute_all(chain, 500 * MiB)) if s.success]
    fits.append(H.best_bisection(chain, 500 * MiB)[1])
    for method in ("checkmate", "checkmate-lp"):
        t0 = time.perf_counter()
        sol = remat.solve(chain, memory="500MiB", method=method, time_limit=2)
        assert time.perf_counter() - t0 < 2.2
        assert sol.status == Status.TIME_LIMIT and "give a time limit of at least" in sol.message
        assert sol.details["candidate"] == "sequential (18 segments)" and sol.objective == pytest.approx(min(fits))
        assert sol.peak_memory <= 500 * MiB
    with pytest.raises(Exception, match="recompute-all's sequence on L = 5000 stages"):
        remat.solve(repeated_toy(5000, tmp_path), memory="500MiB", method="recompute-all", time_limit=5)




def test_the_sequential_cuts_are_skipped_when_they_would_not_fit(monkeypatch):
    """The L checkpoint_sequential cuts cost 3 L^2 replay steps (8 s at L = 20000, twice in one
    rotor-floating call, which took 17 s on a 5 s limit): their estimate is checked against what is
    left, the answer says they were skipped, and a chain's cuts are computed once (kept by content)."""
    c = random_chain(30, seed=4)
    memory = H.schedule_stats(c, H.sequential_schedule(c, 3))[1]
    full = remat.solve(c, memory=memory, method="rotor", time_limit=30)
    assert H.sequential_points_seconds(c) == 0.0          # computed once by that call, then kept
    assert H.sequential_points(c) == [(s, *H.schedule_stats(c, H.sequential_schedule(c, s))) for s in range(1, 31)]
    H._SEQUENTIAL_CACHE.clear()
    assert H.sequential_points_seconds(c) == pytest.approx(H.SEQUENTIAL_STEP_SECONDS * 3 * 30 ** 2)
    monkeypatch.setattr(H, "SEQUENTIAL_STEP_SECONDS", 1.0)          # 2700 s: never fits in 30 s
    cut = remat.solve(c, memory=memory, method="rotor", time_limit=30)
    assert "sequential (the 30 checkpoint_sequential cuts: about 2.7e+03 s)" in " ".join(cut.details["skipped"])
    assert not H._SEQUENTIAL_CACHE
    assert cut.objective == pytest.approx(full.objective)       # the DP still finds the optimum here
