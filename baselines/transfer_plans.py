"""An executable transfer schedule for a method at a memory limit: the one choice of solver and executor
that the offloading executors' callers share (``memplan._compile_budget``'s transfer candidates,
``benchmarks/bench_offload_exec.py``, ``benchmarks/offload_peak_gap.py``).

- Paper 001's methods (``greedy``, ``dynprog``, ``vdnn``, ``tflms``, ``autoswap``;
  :mod:`memplan.baselines.offload`): the schedule in store-all order, converted to the joint model
  (:func:`~memplan.models.remat_offload.offload_schedule_as_joint`), planned and run by
  :func:`~memplan.models.runtime_offload.plan_offload` / ``execute_offload``. Their range of limits is
  paper 001's least memory (:func:`~memplan.models.offload.min_feasible_memory`) to the peak without
  offloading.
- ``joint`` (paper 000): the joint DP's schedule with whole transfers
  (:func:`~memplan.baselines.remat_offload_dp.solve_whole_transfers`), planned and run by
  ``plan_joint`` / ``execute_joint``; its range is the joint least memory to store-all's peak.

The executors live in :mod:`memplan.models.runtime_offload` and need PyTorch, imported only when a
schedule is planned.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from memplan.models.chain import Chain

__all__ = ["TRANSFER_METHODS", "ExecutableTransfers", "transfer_range", "executable_transfers"]

#: paper 001's methods with an executable schedule, and the joint DP
TRANSFER_METHODS = ("greedy", "dynprog", "vdnn", "tflms", "autoswap", "joint")


@dataclass
class ExecutableTransfers:
    """``schedule`` (a :class:`~memplan.models.remat_offload.RematOffloadSchedule`, None when the method
    has none at the limit), its executor's ``plan`` (the replay, where each transfer is issued) and
    ``run`` (``execute_offload`` or ``execute_joint``, same arguments), the solver's ``status`` and
    ``message`` (why there is no schedule); status ``"not executed"`` with the schedule but no plan
    where the executor does not run it (the message says why)."""
    method: str
    memory: float
    schedule: Any = None
    plan: Any = None
    run: Callable | None = None
    status: str = ""
    message: str = ""


def _check(method: str) -> None:
    if method not in TRANSFER_METHODS:
        raise ValueError(f"method {method!r}: one of {', '.join(TRANSFER_METHODS)}")


def transfer_range(chain: Chain, method: str, bandwidth) -> tuple[float, float]:
    """``(least memory, memory from which nothing needs moving)`` of ``method``'s problem (module
    docstring); ``bandwidth`` as the method takes it (the joint DP: one number)."""
    _check(method)
    if method == "joint":
        from memplan.baselines.remat_offload_min_memory import min_memory as joint_min_memory
        from memplan.models.remat import simulate_remat, store_all_ops

        return (float(joint_min_memory(chain, bandwidth).value),
                float(simulate_remat(chain, store_all_ops(chain.L)).peak_memory))
    from memplan.models.offload import min_feasible_memory, peak_memory_no_offload

    return float(min_feasible_memory(chain)), float(peak_memory_no_offload(chain))


def executable_transfers(chain: Chain, method: str, memory: float, bandwidth, *, time_limit: float | None = None,
                         slots: int = 50) -> ExecutableTransfers:
    """``method``'s schedule at ``memory`` over ``bandwidth`` (bytes/s; paper 001's methods also take a
    pair, to the host and to the device), converted and planned for its executor (module docstring).
    ``time_limit`` bounds DYNPROG, vDNN, TFLMS and AutoSwap; ``slots`` is the joint DP's discretization.
    A schedule the executor does not run (paper 001's schedule converted can break the joint model's
    rules, a value freed while read) comes back with status ``"not executed"``."""
    _check(method)
    from memplan.models.remat_offload import InvalidRematOffloadSchedule
    from memplan.models.runtime_offload import execute_joint, execute_offload, plan_joint, plan_offload

    out = ExecutableTransfers(method, float(memory))
    if method == "joint":
        from memplan.baselines.remat_offload_dp import solve_whole_transfers

        sched, why = solve_whole_transfers(chain, float(memory), bandwidth, slots=slots)
        if sched is None:
            out.status, out.message = "no schedule", why
            return out
        out.schedule, out.run, out.status = sched, execute_joint, "feasible"
        planner = plan_joint
    else:
        from memplan.baselines import offload as paper001
        from memplan.models.remat_offload import offload_schedule_as_joint
        from memplan.models.solution import InfeasibleError

        solver = getattr(paper001, method)
        try:
            sol = (solver(chain, float(memory), bandwidth) if method == "greedy"
                   else solver(chain, float(memory), bandwidth, time_limit=time_limit))
        except InfeasibleError as e:            # below paper 001's least memory
            out.status, out.message = "infeasible", str(e)
            return out
        out.status, out.message = str(sol.status), sol.message
        if not sol.success:
            return out
        out.schedule, out.run = offload_schedule_as_joint(chain, sol.schedule, bandwidth), execute_offload
        planner = plan_offload
    try:
        out.plan = planner(chain, out.schedule, bandwidth)
    except InvalidRematOffloadSchedule as e:
        out.status, out.message, out.run = "not executed", str(e), None
    return out
