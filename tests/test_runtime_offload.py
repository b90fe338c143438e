"""The offloading executor (models.runtime_offload) on paper 001's schedules (memplan.offload.solve,
GREEDY and DYNPROG, converted by memplan.remat_offload.offload_schedule_as_joint):

- gradients bit-identical (``torch.equal``) to plain autograd, and the bytes each offload moved equal
  to the profiled ``wabar[j]`` (the whole value);
- on CPU with the emulated host, the memory measured after every operation equals the simulator's
  (:func:`simulate_remat_offload`) for the executed order: each offload taking effect at the boundary
  where the executor frees the device storage and each prefetch where it allocates it
  (:meth:`OffloadPlan.stream_schedule`, the order the CUDA path's caching allocator sees too), read
  from the replay's memory trace at each operation's end; a second reference is the hand count
  ``simulate_remat(store-all).memory_after[p] - sum of wabar[j] over the values on the host after
  operation p``; the measured peak is at most that schedule's simulated peak and at most the
  planned schedule's (the solver's);
- without transfers it holds, per operation, the bytes models.runtime.execute holds;
- schedules the executor does not run are refused with a message that says why.

The chain's sizes are profiled on the same stages with the tracker the executor uses; its times are
replaced by fixed ones (the solvers' choices then do not depend on this machine's timings).
"""
import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import linearize_keeping_views as linearize_model  # noqa: E402  (the offload test chain's stages)
from conftest import offload_test_chain  # noqa: E402

from memplan import offload  # noqa: E402
from memplan.baselines.remat_heuristics import bisection_schedule  # noqa: E402
from memplan.models.memory import TensorMemoryTracker  # noqa: E402
from memplan.models.offload import min_feasible_memory, peak_memory_no_offload  # noqa: E402
from memplan.models.remat import simulate_remat, store_all_ops  # noqa: E402
from memplan.models.remat_offload import (InvalidRematOffloadSchedule, RematOffloadSchedule,  # noqa: E402
                                          Transfer, simulate_remat_offload)
from memplan.models.runtime_offload import execute_offload, plan_offload, view_stages  # noqa: E402
from memplan.remat_offload import offload_schedule_as_joint  # noqa: E402

GPT = dict(n_layer=2, n_embd=32, n_head=4, vocab=50, n_ctx=16, dropout=0.1)
CASES = {"resnet18": ({}, (3, 32, 32)), "gpt2": (GPT, (8,))}
FRACTIONS = (0.1, 0.5, 0.9)          # of the way from paper 001's minimum memory to M_peak (no offloading)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_emulated_host_is_not_counted_by_the_tracker():
    """The CPU host buffers (numpy memory wrapped by torch.from_numpy) are invisible to the dispatch
    tracker; a copy into them and out of them moves no counted byte; a device tensor made from them is."""
    with TensorMemoryTracker() as tr:
        dev = torch.arange(1000, dtype=torch.float32)          # 4000 B, counted
        host = torch.from_numpy(np.empty(4000, dtype=np.uint8)).view(torch.float32).view(10, 100)
        host.copy_(dev.view(10, 100))
        assert tr.current == 4000
        del dev
        assert tr.current == 0
        back = torch.empty(1000, dtype=torch.float32)
        back.copy_(host.view(-1))
        assert tr.current == 4000 and torch.equal(back, torch.arange(1000, dtype=torch.float32))


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    name = request.param
    kw, shape = CASES[name]
    c = offload_test_chain(name, kw, shape)
    chain, bandwidth = c["chain"], c["bandwidth"]
    schedules = {}
    lo, hi = min_feasible_memory(chain), peak_memory_no_offload(chain)
    for method in ("dynprog", "greedy"):
        for f in FRACTIONS:
            mem = float(np.floor(lo + f * (hi - lo)))
            sol = offload.solve(chain, memory=mem, bandwidth=bandwidth, method=method, time_limit=10)
            assert sol.success, (name, method, f, sol.message)
            schedules[method, f] = (mem, offload_schedule_as_joint(chain, sol.schedule, bandwidth))
    return dict(c, schedules=schedules)


def _run(c, sched, **kw):
    m = copy.deepcopy(c["model"])
    lm = linearize_model(m, c["x"], c["loss_fn"])
    torch.manual_seed(123)
    res = execute_offload(lm.stages, lm.loss_stage(c["loss_fn"]), c["x"], sched, c["chain"], c["bandwidth"], **kw)
    return m, lm, res


def test_gradients_are_bit_identical_and_whole_values_move(case):
    c, chain = case, case["chain"]
    offloaded_any = False
    for (method, f), (mem, sched) in c["schedules"].items():
        m, _, res = _run(c, sched)
        assert res.loss == c["loss"]
        for n, p in m.named_parameters():
            assert torch.equal(p.grad, c["grads"][n]), f"{c['name']} {method} {f}: gradient of {n} differs"
        want = {t.index: t.nbytes for t in sched.transfers if t.kind == "offload"}
        assert set(res.moved) == set(want)
        for j, nb in res.moved.items():            # the storages moved are exactly what the profile counts
            assert nb == (chain.wa[0] if j == 0 else chain.wabar[j]) == want[j]
        offloaded_any |= bool(want)
        if f == FRACTIONS[0]:
            assert len(want) >= 2, (method, want)     # the tight limit really needs offloading
    assert offloaded_any


def test_measured_memory_is_the_simulated_memory_of_the_executed_order(case):
    c, chain = case, case["chain"]
    lm0 = linearize_model(copy.deepcopy(c["model"]), c["x"], c["loss_fn"])
    alias = view_stages(lm0.stages, c["x"])
    assert alias == ([13] if c["name"] == "resnet18" else [])
    L = chain.L
    ops = store_all_ops(L)
    base = simulate_remat(chain, ops)
    for (method, f), (mem, sched) in c["schedules"].items():
        plan = plan_offload(chain, sched, c["bandwidth"])
        _, _, res = _run(c, sched, measure_memory=True)
        assert res.issue == plan.issue
        executed, bw = plan.stream_schedule(chain)
        rep = simulate_remat_offload(chain, executed, bw)
        trace = dict(rep.memory_trace)
        ends = [r + (chain.ub[l] if op == "B" else chain.uf[l]) for r, (op, l) in zip(executed.release, ops)]
        sim_after = [trace[e] for e in ends]
        host = plan.host_intervals()
        hand = [base.memory_after[p] - sum(chain.wabar[j] for j, (o, q) in host.items() if o <= p < q)
                for p in range(len(ops))]
        assert sim_after == pytest.approx(hand, rel=0, abs=1e-6)
        # the flatten's output is counted twice by the chain while abar^{l-1} and abar^l are both stored:
        # from F^l (operation l-1) up to B^l (operation 2L+2-l, excluded)
        twice = [sum(chain.wa[l] for l in alias if l - 1 <= p < 2 * L + 2 - l) for p in range(len(ops))]
        assert [a + t for a, t in zip(res.memory_after, twice)] == sim_after, (c["name"], method, f)
        # during an operation: the profile's overhead of a forward is at most what it holds (in the
        # order executed, an offload is freed at its release boundary, OffloadPlan.release_boundaries)
        assert res.peak_memory <= rep.peak_memory, (c["name"], method, f)
        planned = simulate_remat_offload(chain, sched, c["bandwidth"])
        assert res.peak_memory <= planned.peak_memory
        if f == FRACTIONS[0]:
            nothing = simulate_remat(chain, ops).peak_memory
            assert res.peak_memory < nothing        # it saved memory


def test_without_transfers_it_holds_what_the_remat_executor_holds(case):
    """Store-all with no transfer: per operation, the bytes after and the peak during equal those of
    models.runtime.execute (one backward call per stage), which tests/test_runtime.py checks against
    the simulator."""
    from memplan.models.runtime import execute

    c = case
    ops = store_all_ops(c["chain"].L)
    _, _, res = _run(c, RematOffloadSchedule(ops), measure_memory=True)
    m = copy.deepcopy(c["model"])
    lm = linearize_model(m, c["x"], c["loss_fn"])
    torch.manual_seed(123)
    ref = execute(lm.stages, lm.loss_stage(c["loss_fn"]), c["x"], ops, measure_memory=True, fuse_backward=False)
    assert res.memory_after == ref.memory_after
    assert res.memory_peak_during == ref.memory_peak_during


def test_refused_schedules(case):
    c, chain = case, case["chain"]
    L = chain.L
    _, sched = c["schedules"]["dynprog", FRACTIONS[0]]
    # a re-materialization sequence
    with pytest.raises(InvalidRematOffloadSchedule, match="store-all order only"):
        _run(c, RematOffloadSchedule(bisection_schedule(L).ops))
    # a split transfer
    off = next(t for t in sched.transfers if t.kind == "offload")
    parts = [Transfer("offload", off.index, off.nbytes / 2, off.release, part=0),
             Transfer("offload", off.index, off.nbytes / 2, off.release, part=1)]
    split = RematOffloadSchedule(sched.ops, sched.release,
                                 [u for t in sched.transfers for u in (parts if t is off else [t])])
    with pytest.raises(InvalidRematOffloadSchedule, match="whole values only"):
        _run(c, split)
    # a prefetch with no offload before it
    lone = RematOffloadSchedule(sched.ops, sched.release, [t for t in sched.transfers if t is not off])
    with pytest.raises(InvalidRematOffloadSchedule, match="one offload then one prefetch"):
        _run(c, lone)


@pytest.mark.parametrize("case", ["resnet18"], indirect=True)     # the zoo case with a view stage
def test_a_value_sharing_its_storage_is_not_moved(case):
    """ResNet-18's flatten stage (13) returns a view of a^12: offloading abar^12 would not free a^13."""
    c, chain = case, case["chain"]
    assert c["name"] == "resnet18"
    ops = store_all_ops(chain.L)
    rep = simulate_remat_offload(chain, RematOffloadSchedule(ops), None)
    j = 12
    t0 = rep.op_end[j]                                # end of F^13, the forward reader of a^12
    dur = chain.wabar[j] / c["bandwidth"]
    sched = RematOffloadSchedule(ops, transfers=[Transfer("offload", j, float(chain.wabar[j]), release=t0),
                                                 Transfer("prefetch", j, float(chain.wabar[j]), release=t0 + dur)])
    with pytest.raises(InvalidRematOffloadSchedule, match="shares a storage"):
        _run(c, sched)


def test_merged_view_stages_move_as_one_value():
    """GPT-2 with dropout 0: the embedding's dropout returns its input (stage 2 a view of a^1), so
    a^1 and a^2 are one storage that the chain counts twice and the executor cannot move apart.
    Merged (merge_view_stages), the chain has one stage fewer and no view; with no transfer the
    memory after every operation is the merged chain's store-all simulation exactly (so the merged
    row's sizes are right), and a DYNPROG schedule that moves the merged value 1 gives autograd's
    gradients and the simulator's memory for the executed order."""
    from memplan.models.runtime_offload import merge_view_stages

    gpt = dict(GPT, dropout=0.0)
    c = offload_test_chain("gpt2", gpt, (8,))
    lm = linearize_model(copy.deepcopy(c["model"]), c["x"], c["loss_fn"])
    assert view_stages(lm.stages, c["x"]) == [2]
    chain = c["chain"]
    assert chain.wa[2] == chain.wa[1]            # one storage, counted at both indices
    m = copy.deepcopy(c["model"])
    lm = linearize_model(m, c["x"], c["loss_fn"])
    stages, merged = merge_view_stages(lm.stages, chain, [2])
    assert merged.L == chain.L - 1 and view_stages(stages, c["x"]) == []
    assert merged.stage_names[1] == f"{chain.stage_names[1]}+{chain.stage_names[2]}"
    ops = store_all_ops(merged.L)
    torch.manual_seed(123)
    res = execute_offload(stages, lm.loss_stage(c["loss_fn"]), c["x"], RematOffloadSchedule(ops), merged,
                          c["bandwidth"], measure_memory=True)
    assert res.memory_after == simulate_remat(merged, ops).memory_after
    lo, hi = min_feasible_memory(merged), peak_memory_no_offload(merged)
    sol = offload.solve(merged, memory=float(np.floor(lo + 0.1 * (hi - lo))), bandwidth=c["bandwidth"],
                        method="dynprog", time_limit=10)
    sched = offload_schedule_as_joint(merged, sol.schedule, c["bandwidth"])
    assert 1 in {t.index for t in sched.transfers if t.kind == "offload"}
    for p in m.parameters():
        p.grad = None
    torch.manual_seed(123)
    res = execute_offload(stages, lm.loss_stage(c["loss_fn"]), c["x"], sched, merged, c["bandwidth"],
                          measure_memory=True)
    for n, p in m.named_parameters():
        assert torch.equal(p.grad, c["grads"][n]), n
    plan = plan_offload(merged, sched, c["bandwidth"])
    executed, bw = plan.stream_schedule(merged)
    rep = simulate_remat_offload(merged, executed, bw)
    trace = dict(rep.memory_trace)
    ends = [r + (merged.ub[l] if op == "B" else merged.uf[l]) for r, (op, l) in zip(executed.release, ops)]
    assert res.memory_after == [trace[e] for e in ends]


def test_unsynchronized_run_is_the_same_step(case):
    """``sync=False`` (queued as ``loss.backward()``: no synchronize and no read of the loss on CUDA)
    changes nothing on a CPU: the same loss and gradients."""
    (method, f), (mem, sched) = next(iter(case["schedules"].items()))
    m, _, res = _run(case, sched, sync=False)
    assert res.loss == case["loss"] and res.loss_tensor is None
    for n, p in m.named_parameters():
        assert torch.equal(p.grad, case["grads"][n]), n

