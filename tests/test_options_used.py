"""``OPTIONS_USED``: the tuning options each remat/offload method reads. A sweep drops the others from
a method's tasks (solved once, drawn as one curve), so a wrong declaration would silently change an
answer: each method is solved with every option it is declared to ignore set to an unusual value,
and must give exactly the default answer."""
from __future__ import annotations

import pytest

import memplan
from memplan.experiments.sweep_engine import Grid, expand
from memplan.models.offload import min_feasible_memory, peak_memory_no_offload

# values far from the defaults (slots=None, exact=False, gap=1e-4, threads=None, solver_log=None)
ODD = {"slots": 7, "exact": True, "gap": 0.5, "threads": 1}


def _same(a, b):
    assert a.status == b.status and a.objective == b.objective and a.peak_memory == b.peak_memory, (a, b)


@pytest.mark.parametrize("method", memplan.remat.METHODS)
def test_remat_methods_ignore_what_they_are_declared_to_ignore(method, tmp_path):
    chain = memplan.random_chain(5, seed=4)        # integer sizes: exact=True is allowed everywhere
    lo, hi = memplan.remat.memory_range(chain)
    M = float(int(lo + 0.4 * (hi - lo)))
    ref = memplan.remat.solve(chain, memory=M, method=method, time_limit=30)
    ignored = {k: v for k, v in ODD.items() if k not in memplan.remat.OPTIONS_USED[method]}
    if "solver_log" not in memplan.remat.OPTIONS_USED[method]:
        ignored["solver_log"] = str(tmp_path / "highs.log")
    _same(memplan.remat.solve(chain, memory=M, method=method, time_limit=30, **ignored), ref)
    if "solver_log" in ignored:
        assert not (tmp_path / "highs.log").exists()


@pytest.mark.parametrize("method", memplan.offload.METHODS)
def test_offload_methods_ignore_what_they_are_declared_to_ignore(method, tmp_path):
    chain = memplan.random_chain(8, seed=2)
    mf, mp = min_feasible_memory(chain), peak_memory_no_offload(chain)
    M = float(int(mf + 0.3 * (mp - mf)))
    ref = memplan.offload.solve(chain, memory=M, bandwidth=2.0, method=method, time_limit=30)
    ignored = {k: v for k, v in ODD.items() if k not in memplan.offload.OPTIONS_USED[method]}
    if "solver_log" not in memplan.offload.OPTIONS_USED[method]:
        ignored["solver_log"] = str(tmp_path / "highs.log")
    got = memplan.offload.solve(chain, memory=M, bandwidth=2.0, method=method, time_limit=30, **ignored)
    assert got.status == ref.status and got.objective == ref.objective and got.bound == ref.bound
    if "solver_log" in ignored:
        assert not (tmp_path / "highs.log").exists()


def test_a_sweep_solves_an_ignoring_method_once():
    """slots=20,500 over rotor and sequential: rotor twice per limit, sequential once, without the option."""
    tasks, _ = expand([Grid(problem="remat", instances=["paper004_table2"], methods=["rotor", "sequential"],
                         points=2, options={"slots": [20, 500]})])
    opts = sorted((t["method"], t["options"]) for t in tasks)
    assert opts == [("rotor", '{"slots": 20}')] * 2 + [("rotor", '{"slots": 500}')] * 2 + [("sequential", "{}")] * 2
