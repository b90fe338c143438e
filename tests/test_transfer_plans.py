"""memplan.baselines.transfer_plans: the one choice of solver and executor shared by the budget search's
transfer candidates and the offloading benchmarks, against the solvers called directly."""
from __future__ import annotations

import pytest

from memplan.baselines import offload as paper001
from memplan.baselines.remat_offload_dp import solve_whole_transfers
from memplan.baselines.remat_offload_min_memory import min_memory as joint_min_memory
from memplan.baselines.transfer_plans import TRANSFER_METHODS, executable_transfers, transfer_range
from memplan.models.chain import random_chain
from memplan.models.offload import min_feasible_memory, peak_memory_no_offload
from memplan.models.remat import simulate_remat, store_all_ops
from memplan.models.remat_offload import offload_schedule_as_joint, simulate_remat_offload
from memplan.models.runtime_offload import execute_joint, execute_offload


def test_ranges_are_each_problem_own():
    c = random_chain(6, 3, integer=False, own_overheads=True)
    assert transfer_range(c, "greedy", 1e9) == (min_feasible_memory(c), peak_memory_no_offload(c))
    assert transfer_range(c, "joint", 1e9) == (joint_min_memory(c, 1e9).value,
                                               simulate_remat(c, store_all_ops(c.L)).peak_memory)


@pytest.mark.parametrize("method", TRANSFER_METHODS)
def test_the_schedule_is_the_solver_own_planned_for_its_executor(method):
    c = random_chain(6, 3, integer=False, own_overheads=True)
    beta = float(c.wabar[1:].sum() / c.store_all_time())
    lo, hi = transfer_range(c, method, beta)
    mem = lo + 0.3 * (hi - lo)
    ex = executable_transfers(c, method, mem, beta, time_limit=10)
    assert ex.schedule is not None and ex.plan is not None, ex.message
    if method == "joint":
        ref, _ = solve_whole_transfers(c, mem, beta, slots=50)
        assert ex.run is execute_joint
    else:
        fn = getattr(paper001, method)
        sol = fn(c, mem, beta) if method == "greedy" else fn(c, mem, beta, time_limit=10)
        ref = offload_schedule_as_joint(c, sol.schedule, beta)
        assert ex.run is execute_offload
    assert ex.schedule.ops == ref.ops and ex.schedule.transfers == ref.transfers
    rep = simulate_remat_offload(c, ex.schedule, beta, mem)          # replays within the limit
    assert ex.plan.replay.peak_memory == pytest.approx(rep.peak_memory) and rep.peak_memory <= mem


def test_no_schedule_and_unknown_method():
    c = random_chain(5, 1, integer=False)
    lo, _ = transfer_range(c, "dynprog", 1e9)
    ex = executable_transfers(c, "dynprog", lo * 0.5, 1e9)
    assert ex.schedule is None and ex.plan is None and ex.status == "infeasible" and "minimum feasible" in ex.message
    ex = executable_transfers(c, "joint", joint_min_memory(c, 1e9).value * 0.5, 1e9)
    assert ex.schedule is None and ex.status == "no schedule" and ex.message
    with pytest.raises(ValueError, match="'milp': one of greedy, dynprog, vdnn, tflms, autoswap, joint"):
        executable_transfers(c, "milp", lo, 1e9)
