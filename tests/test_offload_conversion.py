"""Paper 001's schedules (GREEDY, DYNPROG) converted to the joint model
(:func:`memplan.remat_offload.offload_schedule_as_joint`) replay in the joint simulator with paper 001's
own makespan and no higher peak, on shipped profiles where they once did not: DYNPROG offloads a
value while its forward reader runs and prefetches it before paper 001 frees it (GPT-2's loss input).
The joint simulator then delayed the offload to the end of the reader, which delayed the prefetch and
B_j into a later prefetch's reservation: GPT-2 small on the H100 replayed 1 GiB over its limit, and
other schedules were refused (a value freed while B reads it), where the GPU ran them within the limit."""
from __future__ import annotations

import pytest

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
