"""Paper 001's schedules (GREEDY, DYNPROG) converted to the joint model
(:func:`memplan.remat_offload.offload_schedule_as_joint`) replay in the joint simulator with paper 001's
own makespan and no higher peak, on shipped profiles where they once did not: DYNPROG offloads a
value while its forward reader runs and prefetches it before paper 001 frees it (GPT-2's loss input).
The joint simulator then delayed the offload to the end of the reader, which delayed the prefetch and
B_j into a later prefetch's reservation: GPT-2 small on the H100 replayed 1 GiB over its limit, and
other schedules were refused (a value freed while B reads it), where the GPU ran them within the limit."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memplan
from memplan import offload
from memplan.models.offload import min_feasible_memory, peak_memory_no_offload, validate_offload
from memplan.models.remat_offload import simulate_remat_offload
from memplan.remat_offload import offload_schedule_as_joint


@pytest.mark.parametrize("name", ["gpt2-small-b8-s1024-h100", "gpt2-small-b4-s256-cpu", "resnet18-b8-1000-h100"])
def test_converted_schedules_replay_as_paper_001_says(name):
    chain = memplan.load_instance(name).chain
    beta = 12e9
    lo, hi = min_feasible_memory(chain), peak_memory_no_offload(chain)
    checked = 0
    for frac in (0.05, 0.3, 0.6, 0.9):
        M = float(int(lo + frac * (hi - lo)))
        for method in ("dynprog", "greedy"):
            sol = offload.solve(chain, memory=M, bandwidth=beta, method=method, time_limit=20)
            assert sol.success, (method, frac, sol.message)
            own = validate_offload(chain, sol.schedule, M)
            rep = simulate_remat_offload(chain, offload_schedule_as_joint(chain, sol.schedule, beta), beta, M)
            assert rep.makespan == pytest.approx(own.makespan, rel=1e-9), (method, frac)
            # the joint model also holds the loss's seed gradient delta^{L+1}, which paper 001 leaves out
            assert rep.peak_memory <= own.peak_memory * (1 + 1e-9) + float(chain.wd[chain.L + 1]), (method, frac)
            checked += 1
    assert checked == 8


def test_a_link_with_two_speeds():
    """``bandwidth=(to the host, to the device)``: offloads last nbytes / the first, prefetches nbytes /
    the second; a pair of equal speeds is the single number. The docstring's two-stage chain: a^0
    (4 B) offloaded from 1 s, brought back from 2 s."""
    from memplan.models.chain import Chain
    from memplan.models.remat_offload import RematOffloadSchedule, Transfer

    c = Chain.from_stages(uf=[1, 1], ub=[2, 2], wa=[4, 2, 2])
    ops = [("F_all", 1), ("F_all", 2), ("F_all", 3), ("B", 3), ("B", 2), ("B", 1)]

    def run(bw):
        moves = [Transfer("offload", 0, 4.0, release=1.0), Transfer("prefetch", 0, 4.0, release=2.0)]
        return simulate_remat_offload(c, RematOffloadSchedule(ops, transfers=moves), bw)

    one, pair = run(4.0), run((4.0, 4.0))
    assert (one.makespan, one.peak_memory, one.transfer_end) == (pair.makespan, pair.peak_memory, pair.transfer_end)
    slow_out = run((2.0, 4.0))          # the offload takes 2 s, so the prefetch starts at 3 s
    assert slow_out.transfer_start == [1.0, 3.0] and slow_out.transfer_end == [3.0, 4.0]
    slow_in = run((4.0, 2.0))           # the prefetch takes 2 s
    assert slow_in.transfer_start == [1.0, 2.0] and slow_in.transfer_end == [2.0, 4.0]
    assert slow_in.makespan >= one.makespan


def test_whole_values_round_up_a_part_and_merge_separate_runs():
    """The docstring's two-stage chain (a^0 = 4 B, read by F^1 and B^1): an offload of a^0 in two
    separate runs of 1 B and 2 B becomes one offload of all 4 B at the first run's place, and the
    prefetch's two runs one whole prefetch at the first one's place."""
    from memplan.models.chain import Chain
    from memplan.models.remat_offload import RematOffloadSchedule, Transfer, whole_values

    c = Chain.from_stages(uf=[1, 1], ub=[2, 2], wa=[4, 2, 2])
    ops = [("F_all", 1), ("F_all", 2), ("F_all", 3), ("B", 3), ("B", 2), ("B", 1)]
    moves = [Transfer("offload", 0, 1.0, release=1.0), Transfer("offload", 0, 2.0, release=1.5),
             Transfer("prefetch", 0, 1.0, release=2.5), Transfer("prefetch", 0, 2.0, release=3.0)]
    out = whole_values(RematOffloadSchedule(ops, transfers=moves), c, 100.0)
    assert [(t.kind, t.index, t.nbytes, t.release) for t in out.transfers] == [
        ("offload", 0, 4.0, 1.0), ("prefetch", 0, 4.0, 2.5)]
    rep = simulate_remat_offload(c, out, 100.0)
    assert rep.transfer_start == [1.0, 2.5] and rep.transfer_end == [1.04, 2.54]


@pytest.mark.parametrize("frac", [0.05, 0.1, 0.2])
def test_joint_dp_whole_transfers_are_what_the_executor_runs(frac):
    """GPT-2 small's H100 profile at low memory, where the joint DP moves part of a value (the executor
    refused the merged schedule on the H100, 'moves 1.31113e+08 B (part 0)'): solve_whole_transfers's
    schedule replays within the limit and passes the executor's own check (plan_joint: whole values,
    an offload then a prefetch per trip)."""
    pytest.importorskip("torch")
    from memplan.baselines.remat_offload_dp import solve_whole_transfers
    from memplan.baselines.remat_offload_min_memory import min_memory as joint_min_memory
    from memplan.models.remat import simulate_remat, store_all_ops
    from memplan.models.runtime_offload import plan_joint

    chain = memplan.load_instance("gpt2-small-b8-s1024-h100").chain
    beta = 49e9
    lo, hi = joint_min_memory(chain, beta).value, simulate_remat(chain, store_all_ops(chain.L)).peak_memory
    mem = float(int(lo + frac * (hi - lo)))
    sched, why = solve_whole_transfers(chain, mem, beta)
    assert sched is not None, why
    assert simulate_remat_offload(chain, sched, beta).peak_memory <= mem
    plan = plan_joint(chain, sched, beta)
    for t, b in zip(sched.transfers, plan.issue):
        st = plan.states[b][t.index]
        assert t.nbytes == (chain.wa if st == 1 else chain.wabar)[t.index]


@settings(max_examples=40, deadline=None)
@given(L=st.integers(3, 6), seed=st.integers(0, 10_000), f=st.floats(0.0, 0.8), beta=st.sampled_from([0.5, 2.0, 8.0]))
def test_whole_values_are_what_the_executor_accepts(L, seed, f, beta):
    """On random chains, the joint DP's schedule merged (coalesce_parts) and made of whole values
    (whole_values) is accepted by the joint executor's own check wherever it replays: every transfer
    moves the whole value stored at its index, each trip an offload then a prefetch."""
    pytest.importorskip("torch")
    from memplan.baselines.remat_offload_dp import solve_remat_offload_dp
    from memplan.baselines.remat_offload_min_memory import min_memory as joint_min_memory
    from memplan.models.chain import random_chain
    from memplan.models.remat import simulate_remat, store_all_ops
    from memplan.models.remat_offload import InvalidRematOffloadSchedule, coalesce_parts, whole_values
    from memplan.models.runtime_offload import plan_joint

    c = random_chain(L, seed)
    lo = joint_min_memory(c, beta).value
    hi = simulate_remat(c, store_all_ops(c.L)).peak_memory
    sol = solve_remat_offload_dp(c, float(lo + f * (hi - lo)) + 1, beta, slots=40)
    if sol.schedule is None:
        return
    sched = whole_values(coalesce_parts(sol.schedule, c), c, beta)
    try:
        simulate_remat_offload(c, sched, beta)
    except InvalidRematOffloadSchedule:
        return                              # the replay refuses it; solve_whole_transfers then says why
    plan = plan_joint(c, sched, beta)
    for t, b in zip(sched.transfers, plan.issue):
        st_ = plan.states[b][t.index]
        assert t.nbytes == (c.wa if st_ == 1 else c.wabar)[t.index]
