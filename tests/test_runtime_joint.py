"""The joint executor (models.runtime_offload.execute_joint) on re-materialization sequences and on
paper 000's joint DP schedules (baselines.remat_offload_dp), their transfer parts merged by
coalesce_parts:

- re-materialization alone (sequential checkpointing, rotor): gradients bit-identical (``torch.equal``)
  to plain autograd, and per operation the bytes after and the peak during equal to
  models.runtime.execute's (``fuse_backward=False``), which tests/test_runtime.py checks against the
  simulator;
- joint DP schedules at limits where the DP both recomputes and offloads: the coalesced schedule
  replays within the limit, its execution gives bit-identical gradients, each offload moves the
  profiled size of the value stored at its index then (a^l or abar^l), the memory after every
  operation equals the simulator's for the executed order (offloads taking effect where the
  executor frees the storage, prefetches where it allocates, :meth:`OffloadPlan.stream_schedule`), and the measured peak is at most the coalesced
  schedule's simulated peak and below store-all's;
- schedules it does not run are refused with a message that says why.

Sizes profiled on the same stages, times fixed by a formula (as tests/test_runtime_offload.py).
The joint DP used to change torch's intra-op thread count (numba's ``set_num_threads`` restores
numba's default through the OpenMP runtime torch shares; a different count changes LayerNorm's
weight-gradient reduction order): the fixture checks that it no longer does.
"""
import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import linearize_keeping_views as linearize_model  # noqa: E402  (the offload test chain's stages)
from conftest import offload_test_chain  # noqa: E402

from memplan import remat  # noqa: E402
from memplan.baselines.remat_heuristics import sequential_schedule  # noqa: E402
from memplan.baselines.remat_offload_dp import solve_remat_offload_dp  # noqa: E402
from memplan.baselines.remat_offload_min_memory import min_memory as joint_min_memory  # noqa: E402
from memplan.models.remat import simulate_remat, store_all_ops  # noqa: E402
from memplan.models.remat_offload import (InvalidRematOffloadSchedule, RematOffloadSchedule,  # noqa: E402
                                          Transfer, simulate_remat_offload)
from memplan.models.runtime import execute  # noqa: E402
from memplan.models.runtime_offload import coalesce_parts, execute_joint, plan_joint, view_stages  # noqa: E402

GPT = dict(n_layer=2, n_embd=32, n_head=4, vocab=50, n_ctx=16, dropout=0.1)
# name -> (model kwargs, input shape, joint DP slots, fractions of the way from the least memory of the
# joint problem to store-all's peak where the DP recomputes and offloads and the coalesced schedule replays;
# GPT-2's 0.15 was 0.2 before the solvers planned with each forward's own overhead: from 0.2 to 0.3 the DP
# now fits by re-materialization alone)
CASES = {"resnet18": ({}, (3, 32, 32), 200, (0.3, 0.6, 0.9)), "gpt2": (GPT, (8,), 50, (0.1, 0.15, 0.5))}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    name = request.param
    kw, shape, slots, fracs = CASES[name]
    c = offload_test_chain(name, kw, shape)
    chain, bandwidth = c["chain"], c["bandwidth"]
    lo = joint_min_memory(chain, bandwidth).value
    hi = simulate_remat(chain, store_all_ops(chain.L)).peak_memory
    joint = {}
    threads = torch.get_num_threads()
    for f in fracs:
        mem = float(np.floor(lo + f * (hi - lo)))
        sol = solve_remat_offload_dp(chain, mem, bandwidth, slots=slots)
        assert torch.get_num_threads() == threads     # the DP leaves torch's threads alone (module docstring)
        assert sol.schedule is not None, (name, f, sol.message)
        joint[f] = (mem, sol)
    return dict(c, joint=joint, hi=hi)


def _run(c, sched, **kw):
    m = copy.deepcopy(c["model"])
    lm = linearize_model(m, c["x"], c["loss_fn"])
    torch.manual_seed(123)
    if not isinstance(sched, RematOffloadSchedule):
        sched = RematOffloadSchedule(list(sched))
    res = execute_joint(lm.stages, lm.loss_stage(c["loss_fn"]), c["x"], sched, c["chain"], c["bandwidth"], **kw)
    return m, res


def _same_grads(c, m, what):
    for n, p in m.named_parameters():
        assert torch.equal(p.grad, c["grads"][n]), f"{c['name']} {what}: gradient of {n} differs"


def test_remat_sequences_match_autograd_and_the_remat_executor(case):
    c, chain = case, case["chain"]
    L = chain.L
    lo, hi = remat.memory_range(chain)
    rot = remat.solve(chain, memory=(lo + hi) / 2, method="rotor", slots=200)
    assert rot.success, rot.message
    seqs = {"sequential": sequential_schedule(L, 3).ops, "rotor": rot.schedule.ops}
    for what, ops in seqs.items():
        assert sum(op in ("F_ck", "F_none") for op, _ in ops) > 0      # it really re-materializes
        assert len(ops) > 2 * (L + 1)
        m, res = _run(c, ops, measure_memory=True)
        assert res.loss == c["loss"]
        _same_grads(c, m, what)
        assert res.moved == {} and res.issue == []
        m2 = copy.deepcopy(c["model"])
        lm = linearize_model(m2, c["x"], c["loss_fn"])
        torch.manual_seed(123)
        ref = execute(lm.stages, lm.loss_stage(c["loss_fn"]), c["x"], ops, measure_memory=True, fuse_backward=False)
        assert res.memory_after == ref.memory_after, what
        assert res.memory_peak_during == ref.memory_peak_during, what


def _views(c):
    """Stages whose output is a view of their input (ResNet-18's flatten, 13): the chain counts that
    output apart although it shares the input's storage."""
    return view_stages(linearize_model(copy.deepcopy(c["model"]), c["x"], c["loss_fn"]).stages, c["x"])


def test_joint_dp_schedules_run_coalesced(case):
    c, chain = case, case["chain"]
    views = _views(c)
    assert views == ([13] if c["name"] == "resnet18" else [])
    for mem, sol in c["joint"].values():
        what = f"{c['name']} at {mem:.0f} B"
        dp = sol.schedule
        # the DP both recomputes and offloads here, in parts of one memory slot
        assert sol.details["recompute_time"] > 0 and sum(op != "B" for op, _ in dp.ops) > chain.L + 1, what
        assert dp.offloaded(), what
        assert len(dp.transfers) >= 2 * len(dp.offloaded())
        sched = coalesce_parts(dp, chain)
        assert sched.ops == dp.ops and sched.release == dp.release
        assert len(sched.transfers) == 2 * len(dp.offloaded())      # one offload and one prefetch per value
        assert sched.offloaded() == pytest.approx(dp.offloaded(), rel=1e-12)
        planned = simulate_remat_offload(chain, sched, c["bandwidth"], mem)       # replays within the limit
        plan = plan_joint(chain, sched, c["bandwidth"])
        m, res = _run(c, sched, measure_memory=True)
        assert res.loss == c["loss"]
        _same_grads(c, m, what)
        assert res.issue == plan.issue
        # each offload moved the profiled size of the value stored at its index when it was issued
        for t, b in zip(sched.transfers, plan.issue):
            if t.kind == "offload":
                st = plan.states[b][t.index]
                assert st in (1, 2)
                assert res.moved[t.index] == (chain.wa if st == 1 else chain.wabar)[t.index] == t.nbytes, what
        # memory after every operation: the simulator's for the executed order, less the flatten's
        # output, counted by the chain apart from its input while both are stored
        executed, bw = plan.stream_schedule(chain)
        rep = simulate_remat_offload(chain, executed, bw)
        trace = dict(rep.memory_trace)
        ends = [r + (chain.ub[l] if op == "B" else chain.uf[l]) for r, (op, l) in zip(executed.release, sched.ops)]
        twice = [sum(chain.wa[l] for l in views if plan.states[p + 1][l - 1] and plan.states[p + 1][l])
                 for p in range(len(sched.ops))]
        assert [a + t for a, t in zip(res.memory_after, twice)] == [trace[e] for e in ends], what
        # the peak during an operation: the chain's overheads are those of F_all and the profiled
        # backward, a recomputation without autograd may need less, so at most the simulated peaks
        assert res.peak_memory <= rep.peak_memory and res.peak_memory <= planned.peak_memory <= mem, what
        assert res.peak_memory < c["hi"], what
        # what the offloading saved: the same sequence without transfers holds more at some point
        _, bare = _run(c, sched.ops, measure_memory=True)
        assert max(b - a for a, b in zip(res.memory_after, bare.memory_after)) >= min(sched.offloaded().values())


def test_refusals(case):
    c, chain = case, case["chain"]
    L = chain.L
    _, sol = next(iter(c["joint"].values()))
    dp = sol.schedule
    # the DP's parts, not merged: whole values only
    with pytest.raises(InvalidRematOffloadSchedule, match="whole values only"):
        _run(c, dp)
    sched = coalesce_parts(dp, chain)
    off = next(t for t in sched.transfers if t.kind == "offload")
    # a prefetch with no offload before it
    lone = RematOffloadSchedule(sched.ops, sched.release, [t for t in sched.transfers if t is not off])
    with pytest.raises(InvalidRematOffloadSchedule, match="only 0 B are on the host"):
        _run(c, lone)
    # an offload of an index where nothing is stored (a^L, before the forward has reached it)
    ops = store_all_ops(L)
    nothing = RematOffloadSchedule(ops, transfers=[Transfer("offload", L, float(chain.wa[L]), release=0.0),
                                                   Transfer("prefetch", L, float(chain.wa[L]), release=1.0)])
    with pytest.raises(InvalidRematOffloadSchedule, match="not stored"):
        _run(c, nothing)
    # the size of a^j when abar^j is stored (store-all keeps abar^j): not the whole stored value
    j = next(k for k in range(1, L) if chain.wabar[k] > chain.wa[k])
    rep = simulate_remat_offload(chain, RematOffloadSchedule(ops), None)
    t0 = rep.op_end[j]
    small = RematOffloadSchedule(ops, transfers=[Transfer("offload", j, float(chain.wa[j]), release=t0),
                                                 Transfer("prefetch", j, float(chain.wa[j]), release=t0 + 1e-3)])
    with pytest.raises(InvalidRematOffloadSchedule, match=rf"whole values only: abar\^{j}"):
        _run(c, small)


@pytest.mark.parametrize("case", ["resnet18"], indirect=True)     # the zoo case with a view stage
def test_a_value_sharing_its_storage_is_not_moved(case):
    """ResNet-18's flatten stage (13) returns a view of a^12: offloading a^12 would not free a^13.
    Here a^12 is kept as a^12 (F_ck) and offloaded after F_all^13 read it."""
    c, chain = case, case["chain"]
    L = chain.L
    ops = ([("F_all", l) for l in range(1, 12)] + [("F_ck", 12)] + [("F_all", l) for l in range(13, L + 2)]
           + [("B", l) for l in range(L + 1, 12, -1)] + [("F_all", 12), ("B", 12)]
           + [("B", l) for l in range(11, 0, -1)])
    rep = simulate_remat_offload(chain, RematOffloadSchedule(ops), None)
    j = 12
    t0 = rep.op_end[ops.index(("F_all", 13))]
    dur = float(chain.wa[j]) / c["bandwidth"]
    sched = RematOffloadSchedule(ops, transfers=[Transfer("offload", j, float(chain.wa[j]), release=t0),
                                                 Transfer("prefetch", j, float(chain.wa[j]), release=t0 + dur)])
    plan_joint(chain, sched, c["bandwidth"])          # valid for the simulator
    with pytest.raises(InvalidRematOffloadSchedule, match="shares a storage"):
        _run(c, sched)
