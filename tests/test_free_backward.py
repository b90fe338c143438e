"""The replay of the executor without its holds (``simulate_remat``'s ``b_overhead`` and ``release``,
the profile's ``free_backward`` record): paper 004's replay where nothing is freed early, never above
it, a hand-computed example, and, on a real network, the executed peak to the byte (but the 8-byte
loss scalar that a direct backward call holds)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memplan import remat
from memplan.baselines.remat_heuristics import sequential_schedule, store_all_schedule
from memplan.models.chain import Chain, random_chain
from memplan.models.remat import free_backward_chain, free_backward_model, simulate_remat


def _plans(chain):
    plans = [store_all_schedule(chain)] + [sequential_schedule(chain, k) for k in range(2, min(chain.L, 4) + 1)]
    lo, hi = remat.memory_range(chain)
    for f in (0.2, 0.6):
        sol = remat.solve(chain, memory=lo + f * (hi - lo), method="rotor", time_limit=10)
        if sol.success:
            plans.append(sol.schedule)
    return plans


@settings(max_examples=25, deadline=None)
@given(L=st.integers(2, 7), seed=st.integers(0, 10_000), cut=st.floats(0, 1), data=st.data())
def test_never_above_papers_replay_and_equal_with_nothing_freed(L, seed, cut, data):
    chain = random_chain(L, seed)
    release = data.draw(st.sets(st.integers(1, L)))
    lower = chain.ob - cut * (chain.wd + chain.wabar)        # B may free up to delta^l and abar^l first
    for seq in _plans(chain):
        paper = simulate_remat(chain, seq)
        same = simulate_remat(chain, seq, b_overhead=chain.ob, release=[])
        assert same.memory_during == paper.memory_during and same.memory_after == paper.memory_after
        free = simulate_remat(chain, seq, b_overhead=lower, release=release)
        assert all(f <= p + 1e-9 for f, p in zip(free.memory_during, paper.memory_during))
        assert all(f <= p + 1e-9 for f, p in zip(free.memory_after, paper.memory_after))
        assert free.makespan == paper.makespan              # memory only


def test_hand_example():
    """L = 2, store-all: F1 F2 F3 B3 B2 B1 with a^0 = 1, a^1 = 4 (abar^1 = 6), a^2 = 3 (abar^2 = 5), the
    loss a^3 = abar^3 = 0, delta = a, delta^3 = 1, overheads 0. Stage 1 does not save its output and
    B^2 frees 2 bytes before its peak (b_overhead[2] = -2)."""
    c = Chain.from_stages(uf=[1, 1], ub=[1, 1], wa=[1, 4, 3], wabar=[1, 6, 5], loss=dict(wd=1.0))
    seq = store_all_schedule(c)
    paper = simulate_remat(c, seq)
    # after F1 F2 F3: 1 + 1 (delta^3) + 6 + 5 = 13; B3: 13 + wd[2] = 16, after 13 - 1 + 3 = 15;
    # B2: 15 + wd[1] = 19, after 15 - 3 - 5 + 4 = 11; B1: 11 + wd[0] = 12
    assert paper.memory_during[3:] == [16.0, 19.0, 12.0] and paper.memory_after[3:] == [15.0, 11.0, 1.0]
    ob = np.zeros(4)
    ob[2] = -2.0
    free = simulate_remat(c, seq, b_overhead=ob, release=[1])
    # B2 charges 2 less; a^1 stays (the executor holds it with abar^1) until B1, which is charged
    # without it (handed to B1's root): 11 - 4 + wd[0] = 8, then 11 - 4 - 6 + 1 - a^0 = 1
    assert free.memory_during[3:] == [16.0, 17.0, 8.0] and free.memory_after[3:] == [15.0, 11.0, 1.0]
    # a forward that reads a^1 after B2 (stage 2 again) finds it: the executor still holds it
    again = simulate_remat(c, list(seq.ops[:5]) + [("F_all", 2), ("B", 1)], b_overhead=ob, release=[1])
    assert again.memory_during[-2:] == [16.0, 13.0]
    # stage 1 recomputed after B2 (a segment's top, where a^1 was released at the end of B2 before
    # 2026-11-29 only if abar^1 was there then): F_ck1 F_all2 F_all3 B3 B2 F_all1 B1, from a^0 + delta^3 = 2:
    # 6, 11, 11, 11 + 3 = 14 (after 13), 13 + 4 - 2 = 15 (after 13 - 3 - 5 + 4 - a^1 = 5), 5 + 6 = 11,
    # B1 without a^1: 11 - 4 + 1 = 8 (paper 004's replay: 12)
    seg = [("F_ck", 1), ("F_all", 2), ("F_all", 3), ("B", 3), ("B", 2), ("F_all", 1), ("B", 1)]
    assert simulate_remat(c, seg, b_overhead=ob, release=[1]).memory_during == [6.0, 11.0, 11.0, 14.0, 15.0, 11.0, 8.0]
    assert simulate_remat(c, seg).memory_during == [6.0, 11.0, 11.0, 14.0, 17.0, 11.0, 12.0]
    with pytest.raises(ValueError, match="L \\+ 2 = 4"):
        simulate_remat(c, seq, b_overhead=[0.0, 1.0])
    assert free_backward_model(c) == {}
    assert free_backward_chain(c) is c


@settings(max_examples=25, deadline=None)
@given(L=st.integers(2, 7), seed=st.integers(0, 10_000), cut=st.floats(0, 1), data=st.data())
def test_free_chain_plans_at_or_above_the_free_replay(L, seed, cut, data):
    """free_backward_chain's replay of every plan is the free replay's, operation by operation, where no
    overhead was raised to 0, and never below it: a plan that fits in it fits executed without holds."""
    chain = random_chain(L, seed)
    release = sorted(data.draw(st.sets(st.integers(1, L))))
    lower = chain.ob - cut * (chain.wd + chain.wabar)
    lower[0] = 0.0
    chain.provenance = {"free_backward": {"ob": [float(v) for v in lower], "release": release}}
    planning = free_backward_chain(chain)
    assert planning.ob.min() >= 0 and planning.provenance["free_backward"] == chain.provenance["free_backward"]
    eff = lower - np.array([chain.wa[l] if l in release else 0.0 for l in range(L + 2)])
    exact = bool(np.all(eff[1:] >= 0))
    for seq in _plans(planning):
        free = simulate_remat(chain, seq, **free_backward_model(chain))
        planned = simulate_remat(planning, seq)
        assert all(p >= f - 1e-6 for f, p in zip(free.memory_during, planned.memory_during))
        if exact:
            assert np.allclose(planned.memory_during, free.memory_during)


def _profiled(name, kw, x_shape, vocab=None):
    """(stages, loss stage, input, parameters, chain profiled with its free_backward record) of a zoo
    network at batch 2, cut into single-tensor stages."""
    import torch
    from memplan.models.graph import linearize_model
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss, profile_chain

    torch.manual_seed(0)
    model = get_model(name, **kw).train()
    x = example_input(name, 2, x_shape, vocab=vocab, seed=0)
    loss_fn = classification_loss(seed=0)
    lm = linearize_model(model, x, loss_fn, cuts="saved")
    loss_stage = lm.loss_stage(loss_fn)
    chain = profile_chain(lm.stages, x, loss_stage, repeats=1, free_backward=True)
    return lm.stages, loss_stage, x, list(model.parameters()), chain


def _free_run_peak(stages, loss_stage, x, params, seq, hold=False) -> float:
    """The peak of ``seq`` executed without holds (dispatch tracker), after one warm-up run; ``hold``:
    ``execute``'s (False, or :func:`models.runtime.free_holds`)."""
    import torch
    from memplan.models.memory import step_peak
    from memplan.models.runtime import execute

    def run():
        torch.manual_seed(7)
        execute(stages, loss_stage, x, seq, hold=hold)
    run()
    return step_peak(run, params, "cpu")


def test_free_executor_peaks_where_the_free_replay_says(one_torch_thread):
    """ResNet-18 at 64x64: executed without holds, sequential(k) and rotor plans peak where the free
    replay says, to 8 bytes (the loss scalars a direct call holds), and below paper 004's replay
    (which the executor with its holds follows) by a batch norm stage's gradient."""
    pytest.importorskip("torch")
    stages, loss_stage, x, params, chain = _profiled("resnet18", {}, (3, 64, 64))
    free = free_backward_model(chain)
    assert set(free) == {"b_overhead", "release"}
    assert any(f < o for f, o in zip(free["b_overhead"][1:], chain.ob[1:]))      # some B frees before its peak
    lower = 0
    for seq in [sequential_schedule(chain, 2), sequential_schedule(chain, 4),
                remat.solve(chain, memory=sum(remat.memory_range(chain)) / 2, method="rotor").schedule]:
        measured = _free_run_peak(stages, loss_stage, x, params, seq)
        predicted = simulate_remat(chain, seq, **free).peak_memory
        assert 0 <= measured - predicted <= 8, (measured, predicted)
        lower += predicted < simulate_remat(chain, seq).peak_memory
    assert lower >= 2


def test_a_free_run_at_the_least_memory_stays_within_its_limit(one_torch_thread):
    """ResNet-18 at 64x64, rotor's plan at the least memory of the free chain (planned in it, as
    ``memplan solve --free-backward`` does): without holds the group that starts at the loss stage was
    back-propagated by a direct call, which keeps the loss and its seed (two float32 scalars, 8 bytes)
    to the group's last B, where the replay lets them go after B^{L+1}; the plan peaks inside that
    group, so the run measured 8 bytes over its limit. With the free replay's headroom
    (:func:`models.runtime.free_holds`) it peaks at the replay's peak, the limit, to the byte."""
    pytest.importorskip("torch")
    from memplan.models.runtime import free_holds

    stages, loss_stage, x, params, chain = _profiled("resnet18", {}, (3, 64, 64))
    free = free_backward_model(chain)
    planned = free_backward_chain(chain)
    least = remat.memory_range(planned)[0]
    seq = remat.solve(planned, memory=least, method="rotor").schedule
    replay = simulate_remat(chain, seq, **free)
    assert replay.peak_memory <= least
    bare = _free_run_peak(stages, loss_stage, x, params, seq)
    assert bare - replay.peak_memory == 8          # the two scalars, held by the direct call
    measured = _free_run_peak(stages, loss_stage, x, params, seq, hold=free_holds(seq, replay.memory_during))
    assert measured == replay.peak_memory


def test_segment_tops_free_their_output_in_the_free_replay(one_torch_thread):
    """A tiny GPT-2 cut into single-tensor stages, sequential(2..6) executed without holds: every peak
    where the free replay says, to 8 bytes. With 5 segments the peak is at the top of a segment,
    recomputed after B^{l+1}: its output, which its own backward does not save, is gone in B^l (the
    replay before 2026-11-29 kept it and was 2.6% above the run)."""
    pytest.importorskip("torch")
    kw = dict(n_layer=4, n_embd=64, n_head=4, vocab=256, n_ctx=64, dropout=0.1)
    stages, loss_stage, x, params, chain = _profiled("gpt2", kw, (64,), vocab=256)
    free = free_backward_model(chain)
    below_paper = 0
    for k in range(2, 7):
        seq = sequential_schedule(chain, k)
        measured = _free_run_peak(stages, loss_stage, x, params, seq)
        predicted = simulate_remat(chain, seq, **free).peak_memory
        assert abs(measured - predicted) <= 8, (k, measured, predicted)
        below_paper += predicted < simulate_remat(chain, seq).peak_memory * 0.99
    assert below_paper >= 1          # the 5-segment plan: 2.6% below paper 004's replay


def test_memplan_run_runs_without_holds_where_the_profile_has_the_record(tmp_path, capsys, one_torch_thread):
    """'memplan profile' records the free backward; 'memplan run' then executes the plan without holds
    and compares it with the free replay (peak to the byte on this network: +0.0%), gradients equal;
    ``--holds peak`` runs paper 004's accounting, as before."""
    pytest.importorskip("torch")
    import json

    from memplan.experiments.cli import main

    path = tmp_path / "r18.json"
    assert main(["profile", "--model", "resnet18", "--batch", "2", "--input", "3x32x32", "--threads", "1",
                 "--repeats", "1", "-o", str(path)]) == 0
    rec = json.loads(path.read_text())["provenance"]["free_backward"]
    assert len(rec["ob"]) == 12 + 2 and rec["release"]
    capsys.readouterr()
    assert main(["run", str(path), "--sequence", "sequential:3", "--check-grads", "--time-budget", "1"]) == 0
    out = capsys.readouterr().out
    assert "run without holds" in out and "bit-identical to plain autograd" in out
    assert next(line for line in out.splitlines() if line.startswith("peak memory")).endswith("(+0.0%)")
    import memplan.experiments.cmd_profile as cmd_profile

    with pytest.MonkeyPatch.context() as mp:        # bytes, not MiB to one decimal, in the peak line
        mp.setattr(cmd_profile, "fmt_memory", lambda b, *a, **k: f"{int(round(float(b)))}B")
        assert main(["run", str(path), "--sequence", "sequential:3", "--holds", "peak", "--time-budget", "1"]) == 0
    out = capsys.readouterr().out
    assert "paper 004's accounting" in out and "run without holds" not in out
    import re

    # to the byte: the measured run had the loss's cached targets (16 B here) made inside its window
    got = re.search(r"peak memory\s+measured (\d+)B\s+simulated (\d+)B", out)
    assert got and got.group(1) == got.group(2), out
    # 'memplan solve --free-backward' plans in models.remat.free_backward_chain: its least memory is at
    # most paper 004's, and its plan at that least memory runs within it, as the free replay says
    import re

    def least(*flags):
        assert main(["solve", str(path), "--memory", "1KiB", "-q", *flags]) == 2
        return int(re.findall(r"\((\d+) B\)", capsys.readouterr().err)[-1])     # the minimum's (the limit's first)
    free_min, paper_min = least("--free-backward"), least()
    assert free_min <= paper_min
    sol = tmp_path / "free.json"
    assert main(["solve", str(path), "--memory", f"{free_min}B", "--free-backward", "--json", str(sol), "-q"]) == 0
    capsys.readouterr()
    assert main(["run", str(path), "--solution", str(sol), "--time-budget", "1"]) == 0
    out = capsys.readouterr().out
    assert next(line for line in out.splitlines() if line.startswith("peak memory")).endswith("(+0.0%)")
    # where it does not apply: one line, exit status 2
    assert main(["solve", str(path), "--problem", "offload", "--free-backward", "-q"]) == 2
    assert "--free-backward is an option of --problem remat only" in capsys.readouterr().err
    assert main(["solve", "paper004_table2", "--free-backward", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no free_backward record" in err
