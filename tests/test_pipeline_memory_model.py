"""Issue 18 item 4: the pipeline's memory model counts what autograd keeps (``memory_model="autograd"``,
the default of ``memplan.pipeline.solve``), the paper's model stays available (``"paper"``).

The acceptance check profiles ResNet-18 with ``memplan profile``'s code path on CPU and compares, for
every contiguous stage l..r, the bytes the default model keeps per in-flight mini-batch
(``S[l] + ... + S[r] + H[l]``: H[l] is the stage input that layer l-1, on another GPU, saves too) with
the bytes autograd saves for that stage's forward pass, measured with the profiler's saved-tensor
hooks. The simulator, the ILP's rows (36) and the exact cyclic MILP count ``H`` the same way.
"""
import json

import numpy as np
import pytest

from memplan.baselines.pipeline import pipedream_points
from memplan.baselines.pipeline_exhaustive import exhaustive_search
from memplan.formulations.pipeline_cyclic import min_memory_at_period, solve_cyclic
from memplan.formulations.pipeline_ilp import build_model, check_values, start_values
from memplan.models.chain import Chain, random_chain
from memplan.models.pipeline import (Pattern, TaskData, autograd_boundary_bytes, autograd_stored_bytes,
                                     simulate_pattern, task_data)
from memplan.models.solution import InputError, Status
from memplan.pipeline import baseline_points, report, solve

BW = 5.0


def test_paper_model_stores_the_input_and_autograd_model_abar():
    c = Chain.from_stages(uf=[1.0, 1.0], ub=[1.0, 1.0], wa=[1.0, 2.0, 4.0], wabar=[1.0, 3.0, 7.0],
                          weights=[0.0, 0.0], loss={"wabar": 0.5})
    paper, auto = task_data(c, None, "paper"), task_data(c, None, "autograd")
    assert paper.S[1:].tolist() == [1.0, 2.0]           # a^0, a^1
    assert auto.S[1:].tolist() == [3.0, 7.5]            # abar^1, abar^2 + abar of the loss
    assert task_data(c, None).memory_model == "paper"   # the model-level default is unchanged
    # serial pattern on one GPU: F1 F2 B2 B1 back to back; during B_2 (T_3) the GPU holds both
    # stored items and the running task's input delta^2 = A[2] = max(a^2, delta^2) = 4 and output
    # delta^1 = 2
    p = Pattern(gpu=[0, 0, 0, 0], tau=[0, 1, 2, 3], tau_c=[1, 2, 3], T=4)
    assert simulate_pattern(p, paper).peak_memory == pytest.approx(1 + 2 + 4 + 2)
    assert simulate_pattern(p, auto).peak_memory == pytest.approx(3 + 7.5 + 4 + 2)


def test_autograd_bytes_attribute_each_saved_tensor_once():
    # three layers: F_1 saves its input (8 B) and 1 B of its own; F_2 saves its output a^2 (= abar^2,
    # 4 B) and nothing of its input; F_3 saves its input a^2 (the same storage: counted with F_2)
    # and 2 B; the loss saves its input a^3 (3 B).
    c = Chain.from_stages(uf=[1.0] * 3, ub=[1.0] * 3, wa=[8.0, 5.0, 4.0, 3.0], wabar=[8.0, 6.0, 4.0, 5.0],
                          weights=[0.0] * 3)
    c.provenance = {"saved_by_autograd_bytes": [1.0, 4.0, 2.0, 0.0], "saved_input_bytes": [8.0, 0.0, 4.0, 3.0]}
    assert autograd_stored_bytes(c)[1:].tolist() == [9.0, 4.0, 2.0, 3.0]
    assert task_data(c, None, "autograd").S[1:].tolist() == [9.0, 4.0, 5.0]
    c.provenance = {"saved_by_autograd_bytes": [1.0, 4.0, 2.0]}          # incomplete: abar
    assert task_data(c, None, "autograd").S[1:].tolist() == [6.0, 4.0, 5.0]


def test_stage_input_bytes_by_hand():
    # the chain above: F_2 saves its output a^2 (4 B, o_2 = s_2 + a^2 - abar^2 = 4), F_3 saves that
    # same a^2 as its input (i_3 = 4): H[3] = min(4, 4) = 4. F_1 saves nothing of its output
    # (o_1 = 1 + 5 - 6 = 0), so F_2 shares nothing with it (H[2] = 0); H[1] = 0 (nothing before F_1).
    c = Chain.from_stages(uf=[1.0] * 3, ub=[1.0] * 3, wa=[8.0, 5.0, 4.0, 3.0], wabar=[8.0, 6.0, 4.0, 5.0],
                          weights=[0.0] * 3)
    c.provenance = {"saved_by_autograd_bytes": [1.0, 4.0, 2.0, 0.0], "saved_input_bytes": [8.0, 0.0, 4.0, 3.0]}
    assert autograd_boundary_bytes(c)[1:].tolist() == [0.0, 0.0, 4.0, 0.0]
    auto = task_data(c, None, "autograd")
    assert auto.H.tolist() == [0.0, 0.0, 0.0, 4.0]
    # a GPU holding layer 3 alone keeps what F_3 and the loss save: a^2 (4), its own 2 B, a^3 (3)
    assert auto.stored(3, [0, 0, 1]) == 4.0 + 2.0 + 3.0
    assert auto.stored(3, [0, 0, 0]) == 2.0 + 3.0        # a^2 is counted with layer 2 on that GPU
    # F_3 saves only 1 B of its input: H = min(o_2, i_3) = 1
    c.provenance["saved_input_bytes"] = [8.0, 0.0, 1.0, 3.0]
    assert autograd_boundary_bytes(c)[1:].tolist() == [0.0, 0.0, 1.0, 0.0]
    # the paper's model and the abar fallback add nothing
    assert not task_data(c, None, "paper").H.any()
    c.provenance = {"saved_by_autograd_bytes": [1.0, 4.0, 2.0, 0.0]}
    assert not task_data(c, None, "autograd").H.any()
    with pytest.raises(ValueError, match="H must"):
        TaskData(L=2, d=np.zeros(5), dc=np.zeros(4), A=np.zeros(5), W=np.zeros(3), H=np.array([0.0, 1.0, 0.0]))


def test_simulator_counts_the_stage_input_on_the_first_layer_of_a_gpu():
    c = Chain.from_stages(uf=[1.0] * 3, ub=[1.0] * 3, wa=[8.0, 5.0, 4.0, 3.0], wabar=[8.0, 6.0, 4.0, 5.0],
                          weights=[0.0] * 3)
    c.provenance = {"saved_by_autograd_bytes": [1.0, 4.0, 2.0, 0.0], "saved_input_bytes": [8.0, 0.0, 4.0, 3.0]}
    auto = task_data(c, 1.0, "autograd")
    no_h = task_data(c, 1.0, "autograd")
    no_h.H = np.zeros(4)
    from memplan.baselines.pipeline_modular import serial_pattern
    # serial pattern (one mini-batch in flight): the GPU of layer 3 holds H[3] = 4 B more when layer 2
    # is elsewhere, the other GPU nothing more; with layers 2 and 3 together nothing changes
    p = serial_pattern(auto, [0, 0, 1])
    a, b = simulate_pattern(p, auto), simulate_pattern(p, no_h)
    assert a.memory[1] == b.memory[1] + 4.0 and a.memory[0] == b.memory[0]
    p = serial_pattern(auto, [0, 1, 1])
    assert simulate_pattern(p, auto).memory == simulate_pattern(p, no_h).memory


def _with_stage_inputs(c: Chain) -> Chain:
    """Hand-made provenance with H > 0 at every boundary: F_l saves its output (s_l = abar^l, so
    o_l = a^l) and half of its input (i_l = a^{l-1} / 2), hence H[l] = a^{l-1} / 2 for l >= 2."""
    L = c.L
    c.provenance = {"saved_by_autograd_bytes": [float(c.wabar[l]) for l in range(1, L + 2)],
                    "saved_input_bytes": [float(c.wa[l - 1]) / 2 for l in range(1, L + 2)]}
    return c


@pytest.mark.parametrize("with_h", [False, pytest.param(True, marks=pytest.mark.long)])
def test_ilp_memory_rows_equal_the_simulator_under_the_autograd_model(with_h):
    c = random_chain(5, 3)
    assert np.any(c.wabar[1:6] > c.wa[1:6])
    if with_h:
        _with_stage_inputs(c)
    td = task_data(c, BW, "autograd")
    assert td.H[2:].all() if with_h else not td.H.any()
    checked = boundaries = 0
    for p in pipedream_points(td, 3, n_batches=60):
        if p.pattern is None:
            continue
        r = simulate_pattern(p.pattern, td)
        ilp = build_model(td, 3, r.peak_memory, Tmax=p.pattern.T * 1.01)
        assert hasattr(ilp.model, "eta") == with_h
        assert check_values(ilp, start_values(ilp, p.pattern)) == []
        ilp = build_model(td, 3, r.peak_memory * 0.999, Tmax=p.pattern.T * 1.01)
        bad = check_values(ilp, start_values(ilp, p.pattern))
        assert bad and all(b.startswith("c36_memory") for b in bad)
        checked += 1
        boundaries += len(p.stages) - 1
    assert checked >= 2 and boundaries >= 2


def test_ilp_adds_stage_input_rows_only_where_h_is_positive():
    # H = 0 (paper's model): no extra variable or row; under the autograd model one per task and
    # layer l >= 2 with H[l] > 0
    c = random_chain(4, 1)
    _with_stage_inputs(c)
    for model in ("paper", "autograd"):
        td = task_data(c, BW, model)
        ilp = build_model(td, 2, 1e4)
        assert hasattr(ilp.model, "eta") == hasattr(ilp.model, "c36h_stage_input") == (model == "autograd")
        if model == "autograd":
            assert len(ilp.model.c36h_stage_input) == td.n * int((td.H > 0).sum()) == 8 * 3


@pytest.mark.parametrize("seed,bw,alloc,with_h", [(4, 1.0, (0, 1, 1), False),
                                                    pytest.param(9, 1.0, (0, 1, 1), True, marks=pytest.mark.long)])
def test_exact_cyclic_memory_equals_exhaustive_front_under_the_autograd_model(seed, bw, alloc, with_h):
    c = random_chain(3, seed, integer=True)
    if with_h:
        _with_stage_inputs(c)
    td = task_data(c, bw, "autograd")
    assert td.H[2:].all() if with_h else not td.H.any()
    front = exhaustive_search(td, 2, allocs=[alloc]).front()
    assert len(front) >= 2
    for T1, M in front:
        at = solve_cyclic(td, list(alloc), T1 * (1 + 1e-6), 1, M, P=2, time_limit=30, threads=1,
                          memory_model="exact")
        assert at.status == Status.FEASIBLE and at.sim.peak_memory <= M * (1 + 1e-9)
        below = solve_cyclic(td, list(alloc), T1 * (1 - 1e-3), 1, M, P=2, time_limit=30, threads=1,
                             memory_model="exact")
        assert below.status == Status.INFEASIBLE
        # the exact model's least memory at that period is the exhaustive search's (and its replay's)
        least, _ = min_memory_at_period(td, list(alloc), T1 * (1 + 1e-6), P=2, time_limit=30, threads=1)
        assert least.status == Status.OPTIMAL
        assert least.sim.peak_memory == pytest.approx(min(m for t, m in front if t <= T1 * (1 + 1e-9)), rel=1e-9)


def test_solve_defaults_to_autograd_and_says_so():
    c = random_chain(6, 1)
    kw = dict(memory=10**6, bandwidth=BW, gpus=2, method="pipedream", n_batches=60)
    auto, paper = solve(c, **kw), solve(c, memory_model="paper", **kw)
    assert auto.details["memory_model"] == "autograd" and paper.details["memory_model"] == "paper"
    # the same partition replays with more memory when layers keep abar^l instead of a^{l-1}
    st = [tuple(s) for s in paper.details["stages"]]
    from memplan.baselines.pipeline_eager import simulate_eager
    ea = simulate_eager(task_data(c, BW, "autograd"), st, noam=paper.details["noam"], n_batches=60)
    assert ea.peak_memory > paper.peak_memory
    head = report(auto, c).splitlines()[0]
    assert head.endswith("memory model autograd")
    assert report(paper, c).splitlines()[0].endswith("memory model paper")
    assert json.loads(json.dumps(auto.to_dict(), default=str))["details"]["memory_model"] == "autograd"
    with pytest.raises(InputError, match="memory_model='exact'.*'autograd'.*'paper'"):
        solve(c, memory_model="exact", **kw)
    pts = baseline_points(c, bandwidth=BW, gpus=2, n_batches=60, memory_model="paper")
    with pytest.raises(InputError, match=r"points\[0\].*memory_model='paper'"):
        solve(c, memory=10**6, bandwidth=BW, gpus=2, method="pipedream", points=pts)


def test_cli_memory_model_option(tmp_path, capsys):
    from conftest import write_chain_instance
    from memplan.experiments.cli import main

    path = write_chain_instance(random_chain(4, 2), tmp_path / "r4.json")
    out = tmp_path / "sol.json"
    args = ["solve", str(path), "--problem", "pipeline", "--method", "pipedream", "--memory", "1MB",
            "--bandwidth", "5B/s", "--gpus", "2", "--quiet"]
    assert main(args + ["--memory-model", "paper", "--json", str(out)]) == 0
    assert "memory model paper" in capsys.readouterr().out
    assert json.loads(out.read_text())["details"]["memory_model"] == "paper"
    assert main(args) == 0
    assert "memory model autograd" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(args + ["--memory-model", "abar"])
    assert e.value.code == 2


# ------------------------------------------------------------------------------------ acceptance
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def resnet18():
    """ResNet-18 (batch 2, 3x32x32) profiled on CPU as ``memplan profile`` does (profile_model's
    steps: get_model, linearize_model, profile_chain), plus what each layer saves of its input."""
    from memplan.models.graph import linearize_model
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss, profile_chain

    torch.manual_seed(0)
    model = get_model("resnet18")
    model.train()
    x = example_input("resnet18", 2, (3, 32, 32), seed=0)
    # the minimal single-tensor groups: this model is about stage inputs that two GPUs both save, and
    # the cuts where nobody saves the boundary (which linearize_model's default merges away) are its
    # check that abar over-counts
    lm = linearize_model(model, x, cuts="minimal")
    loss = classification_loss(seed=0)
    chain = profile_chain(lm.stages, x, loss, repeats=1, names=lm.names)
    stages = list(lm.stages) + [loss]
    acts = [x]
    with torch.no_grad():
        for s in lm.stages:
            acts.append(s(acts[-1]))
    saved = chain.provenance["saved_by_autograd_bytes"]
    # the profiler records the bytes of its input each F_l saves; check them by a second measurement
    assert chain.provenance["saved_input_bytes"] == [float(_autograd_saves(stages, acts, l, l) - saved[l - 1])
                                                     for l in range(1, chain.L + 2)]
    return chain, stages, acts


def test_measure_saved_bytes_gives_the_profiled_sizes(resnet18):
    # the sizes do not depend on timing: a second run without timings (on a freshly built network
    # and loss, as benchmarks/add_saved_input_bytes.py rebuilds them) gives the recorded values
    from memplan.models.graph import linearize_model
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss, measure_saved_bytes

    chain, _, _ = resnet18
    torch.manual_seed(0)
    model = get_model("resnet18").train()
    x = example_input("resnet18", 2, (3, 32, 32), seed=0)
    stages = linearize_model(model, x, cuts="minimal").stages
    got = measure_saved_bytes(stages, x, classification_loss(seed=0))
    for key in ("saved_by_autograd_bytes", "saved_input_bytes"):
        assert got[key] == chain.provenance[key]
    assert got["wa"] == chain.wa.tolist() and got["wabar"] == chain.wabar.tolist()
    # the buffers autograd saves are the batch norms' running mean and variance (C floats each)
    bn = [sum(2 * m.num_features * 4 for m in s.modules() if isinstance(m, torch.nn.BatchNorm2d)) for s in stages]
    assert got["saved_buffer_bytes"] == [float(b) for b in bn] + [0.0] and sum(bn) > 0


def _autograd_saves(stages, acts, l, r):
    """Bytes of the distinct storages autograd saves for the forward pass of stages l..r on a fresh
    input (requires grad), the input included when saved, parameters and buffers excluded."""
    from memplan.models.profiler import saved_tensor_bytes

    xi = acts[l - 1].detach().clone()
    if xi.is_floating_point():
        xi.requires_grad_(True)
    mods = [s for s in stages[l - 1:r] if isinstance(s, torch.nn.Module)]
    skip = [t for m in mods for t in (*m.parameters(), *m.buffers())]

    def fwd():
        y = xi
        for s in stages[l - 1:r]:
            y = s(y)
        return y

    return saved_tensor_bytes(fwd, exclude=skip)[1]


def test_default_model_keeps_what_autograd_keeps_per_stage(resnet18):
    chain, stages, acts = resnet18
    L = chain.L
    auto, paper = task_data(chain, None, "autograd"), task_data(chain, None, "paper")
    wabar = chain.wabar
    clean = boundary = 0
    for l in range(1, L):
        for r in range(l, min(L - 1, l + 8) + 1):
            # the GPU of a stage l..r keeps S[l] + ... + S[r], plus H[l] (its first layer's input
            # that layer l-1, on another GPU, saves too): no exception at stage boundaries
            truth = _autograd_saves(stages, acts, l, r)
            model = float(auto.S[l:r + 1].sum() + auto.H[l])
            layer_gpu = [0] * (l - 1) + [1] * (r - l + 1) + [2] * (L - r)
            assert model == pytest.approx(sum(auto.stored(k, layer_gpu) for k in range(l, r + 1)))
            # both are whole bytes (sums of storages' sizes): the model must be exact, not close
            assert model == truth, (l, r, model, truth)
            if auto.H[l] > 0:
                boundary += 1
            else:
                clean += 1
    assert clean >= 20 and boundary >= 20
    # the whole network but the classifier, and the paper's model as the issue describes it: far off
    truth = _autograd_saves(stages, acts, 1, L - 1)
    assert float(auto.S[1:L].sum()) == truth
    assert float(paper.S[1:L].sum()) < 0.8 * truth
    assert float(wabar[1:L].sum()) > 1.1 * truth          # abar alone counts outputs nobody saves
