"""Each forward's own overhead (Chain.of_all, Chain.of_ng): the papers' model charges F_all and the
no-grad forwards one o_f, the larger of the two; the executors hold each its own. The replay, which
charges each its own (as the solvers plan), must equal what the executors measure, operation by
operation, while the papers' one-overhead replay (``one_overhead=True``) is an upper bound of it."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from memplan.baselines.remat_heuristics import sequential_schedule
from memplan.models.chain import Chain, random_chain
from memplan.models.graph import linearize_model
from memplan.models.instance import InstanceError, chain_from_dict, chain_to_dict
from memplan.models.networks import example_input, get_model
from memplan.models.profiler import classification_loss, profile_chain
from memplan.models.remat import simulate_remat, store_all_ops
from memplan.models.runtime import execute


@pytest.fixture(scope="module")
def gpt2():
    torch.manual_seed(0)
    model = get_model("gpt2", n_layer=2, n_embd=32, n_head=2, n_ctx=64, vocab=128).train()
    x = example_input("gpt2", 2, (64,), vocab=128)
    loss_fn = classification_loss()
    lm = linearize_model(model, x, loss_fn)
    loss_stage = lm.loss_stage(loss_fn)
    chain = profile_chain(lm.stages, x, loss_stage, repeats=1, names=lm.names, loss_name=lm.loss_name,
                          input_grad=False)
    return lm.stages, loss_stage, x, chain


@pytest.mark.parametrize("segments", [None, 2])
def test_executed_replay_is_the_executor_operation_by_operation(gpt2, segments):
    """Store-all and sequential(2) on a small GPT-2 (its attention stages' no-grad forward keeps
    several times F_all's transient): the executor's measured peak during every operation and memory
    after it equal the replay to the byte; the one-overhead replay is above it at some
    F_all and never below it."""
    stages, loss_stage, x, chain = gpt2
    assert np.all(chain.of_all <= chain.of) and np.all(chain.of_ng <= chain.of)
    assert np.any(chain.of_all < chain.of)            # the case this is about exists in this chain
    ops = store_all_ops(chain.L) if segments is None else sequential_schedule(chain.L, segments)
    ops = ops.ops if hasattr(ops, "ops") else ops
    run = execute(stages, loss_stage, x, ops, device="cpu", input_grad=False, measure_memory=True)
    own = simulate_remat(chain, ops)
    one = simulate_remat(chain, ops, one_overhead=True)
    assert own.memory_during == pytest.approx(run.memory_peak_during, abs=1.0)
    assert own.memory_after == pytest.approx(run.memory_after, abs=1.0)
    assert own.peak_memory == pytest.approx(run.peak_memory, abs=1.0)
    gaps = np.array(one.memory_during) - np.array(own.memory_during)
    assert gaps.min() >= 0
    f_all = [k for k, (op, _) in enumerate(ops) if op == "F_all"]
    assert gaps[f_all].max() > 0


def test_executed_replay_by_hand():
    """Two stages; F_all^1 charged its own 2 B instead of o_f's 10 B, F_ck^1 its no-grad 10 B."""
    c = Chain.from_stages(uf=[1, 1], ub=[1, 1], wa=[1, 1, 1], wabar=[1, 3, 3], of=[10, 0], ob=[0, 0],
                          of_all=[2, 0], of_ng=[10, 0])
    seq = [("F_ck", 1), ("F_all", 2), ("F_all", 3), ("B", 3), ("B", 2), ("F_all", 1), ("B", 1)]
    one, own = simulate_remat(c, seq, one_overhead=True), simulate_remat(c, seq)
    # F_ck^1: a^0 (1) + delta^3 (0) + a^1 (1) + 10 either way; F_all^1 (op 5) after B^2: a^0 1 + delta^1 1
    # + abar^1 3 + overhead: 10 in the papers' model, 2 as executed
    assert one.memory_during[0] == own.memory_during[0] == 12
    assert (one.memory_during[5], own.memory_during[5]) == (15, 7)
    assert (one.peak_memory, own.peak_memory) == (15, 12)
    assert own.memory_after == one.memory_after


def test_own_overheads_default_to_of_and_follow_its_copies():
    c = random_chain(6, 2)
    assert np.array_equal(c.of_all, c.of) and np.array_equal(c.of_ng, c.of)
    d = dataclasses.replace(c, of_all=c.of / 2)
    assert np.array_equal(d.scaled(memory=3).of_all, c.of * 1.5)
    assert np.array_equal(d.sub_chain(2, 4).of_all[1:4], c.of[2:5] / 2)
    lowered = dataclasses.replace(d, of=c.of / 4)       # a relaxation lowers of: the own overheads follow
    assert np.array_equal(lowered.of_all, c.of / 4) and np.array_equal(lowered.of_ng, c.of / 4)


def test_instance_files_carry_the_own_overheads(gpt2):
    chain = gpt2[3]
    data = json.loads(json.dumps(chain_to_dict(chain, memory_unit="B", digits=None)))
    back, _ = chain_from_dict(data)
    assert np.allclose(back.of_all, chain.of_all) and np.allclose(back.of_ng, chain.of_ng)
    plain = chain_to_dict(random_chain(4, 1))           # no stage differs from o_f: nothing new is written
    assert not any("o_f_all" in row or "o_f_ng" in row for row in plain["stages"])


def test_instance_refuses_an_own_overhead_above_o_f():
    data = chain_to_dict(random_chain(3, 1), memory_unit="B")
    data["stages"][2]["o_f_all"] = data["stages"][2]["o_f"] + 5
    with pytest.raises(InstanceError) as e:
        chain_from_dict(data, "f.json")
    text = str(e.value)
    assert len(text.splitlines()) == 1 and "stages[2].o_f_all" in text and "o_f_all <= o_f" in text
