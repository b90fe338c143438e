"""More of ``memplan run`` / ``memplan profile``: a plan run in the memory model it was planned in, an
edited provenance whose sizes are no longer the network's, a batch that cannot fit in memory, output
files that cannot be written, ``--set`` given twice. Each bad input is one line naming the file, field
or option and what would work, exit status 2."""
import json
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from memplan.experiments.cli import main  # noqa: E402

PROFILE = ["--model", "resnet18", "--batch", "2", "--input", "3x32x32", "--threads", "1"]
TINY_GPT2 = ["--model", "gpt2", "--batch", "2", "--input", "16", "--set", "n_embd=32", "--set", "n_head=2",
             "--set", "vocab=100", "--repeats", "1", "--timing-budget", "0"]


@pytest.fixture(scope="module")
def profiled(tmp_path_factory, one_torch_thread):
    """A ResNet-18 instance made by 'memplan profile' (batch 2, 3x32x32: 5 s on one thread), with the
    free_backward record."""
    path = tmp_path_factory.mktemp("run") / "r18.json"
    assert main(["profile", *PROFILE, "-o", str(path)]) == 0
    assert isinstance(json.loads(path.read_text())["provenance"]["free_backward"], dict)
    return path


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


def _min_memory(instance, tmp_path, capsys, *extra) -> float:
    """The minimum feasible memory 'memplan solve' states for an infeasible limit (1 KiB)."""
    out = tmp_path / "inf.json"
    assert main(["solve", str(instance), "--memory", "1KiB", "-q", "--json", str(out), *extra]) == 2
    capsys.readouterr()
    return float(json.loads(out.read_text())["details"]["min_memory"])


# ----------------------------------------------------------------------------- 1. the planned memory model
def test_a_free_backward_plan_is_refused_with_holds_and_runs_without(profiled, tmp_path, capsys):
    """A plan solved with --free-backward at the free replay's least memory (below paper 004's, so its
    held replay is over the limit) ran with --holds peak over its limit, unsaid (exit 0). The solution
    records the model it was planned in; run refuses the mismatch naming what to pass, and runs it as
    planned by default. A file written before the record is judged by its replays."""
    free_min = _min_memory(profiled, tmp_path, capsys, "--free-backward")
    held_min = _min_memory(profiled, tmp_path, capsys)
    assert free_min < held_min                     # the premise: no held plan fits at free_min
    sol = tmp_path / "free.json"
    assert main(["solve", str(profiled), "--memory", f"{free_min:.0f}B", "--free-backward", "-q",
                 "--json", str(sol)]) == 0
    assert json.loads(sol.read_text())["details"]["memory_model"] == "free_backward"
    capsys.readouterr()
    assert main(["run", str(profiled), "--solution", str(sol), "--holds", "peak", "--time-budget", "0.5"]) == 2
    err = _one_line(capsys)
    assert err.startswith(f"memplan: error: --solution {sol} was planned without holds"), err
    assert "--holds auto" in err and "details.memory_model free_backward" in err
    peak, limit = (float(v) for v in re.search(r"peaks at (\d+) B \(limit (\d+) B\)", err).groups())
    assert limit == free_min and peak >= held_min > limit     # the held replay cannot fit under held_min
    assert main(["run", str(profiled), "--solution", str(sol), "--time-budget", "0.5"]) == 0
    assert "run without holds" in capsys.readouterr().out
    old = json.loads(sol.read_text())
    del old["details"]["memory_model"]
    legacy = tmp_path / "legacy.json"
    legacy.write_text(json.dumps(old))
    assert main(["run", str(profiled), "--solution", str(legacy), "--holds", "peak", "--time-budget", "0.5"]) == 2
    err = _one_line(capsys)
    assert f"--solution {legacy} was planned without holds" in err and "--holds auto" in err


def test_a_free_backward_plan_on_an_instance_without_the_record_is_refused(profiled, tmp_path, capsys):
    """The free record removed from the provenance (the chain's arrays, and so its fingerprint, are
    the same): the plan ran with the holds, as if planned so."""
    sol = tmp_path / "free.json"
    assert main(["solve", str(profiled), "--memory", "1GiB", "--free-backward", "-q", "--json", str(sol)]) == 0
    d = json.loads(profiled.read_text())
    del d["provenance"]["free_backward"]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(d))
    capsys.readouterr()
    assert main(["run", str(bare), "--solution", str(sol), "--time-budget", "0.5"]) == 2
    err = _one_line(capsys)
    assert f"{bare} has no provenance.free_backward record" in err and "profile the network again" in err


def test_a_plan_of_the_papers_model_run_without_holds_says_so(profiled, tmp_path, capsys):
    """A plan solved in paper 004's (held) model runs by default without holds on a free profile: a
    note says it was planned in the held model and gives both replays' peaks (the free one no higher,
    both within the limit); --holds peak runs it as planned, without the note."""
    held_min = _min_memory(profiled, tmp_path, capsys)
    sol = tmp_path / "held.json"
    assert main(["solve", str(profiled), "--memory", f"{held_min:.0f}B", "-q", "--json", str(sol)]) == 0
    assert json.loads(sol.read_text())["details"]["memory_model"] == "paper004"
    capsys.readouterr()
    assert main(["run", str(profiled), "--solution", str(sol), "--time-budget", "0.5"]) == 0
    err = capsys.readouterr().err
    m = re.search(r"planned in paper 004's model \(peak (\d+) B there, limit (\d+) B\); it runs without holds.*"
                  r"\(peak (\d+) B\); --holds peak runs it as planned", err)
    assert m, err
    held, limit, free = (float(v) for v in m.groups())
    assert limit == held_min and free <= held <= limit
    assert main(["run", str(profiled), "--solution", str(sol), "--holds", "peak", "--time-budget", "0.5"]) == 0
    assert "planned in paper 004" not in capsys.readouterr().err


def test_an_unknown_memory_model_in_a_solution_is_named(profiled, tmp_path, capsys):
    sol = tmp_path / "s.json"
    assert main(["solve", str(profiled), "--memory", "1GiB", "-q", "--json", str(sol)]) == 0
    d = json.loads(sol.read_text())
    d["details"]["memory_model"] = "autograd"
    sol.write_text(json.dumps(d))
    capsys.readouterr()
    assert main(["run", str(profiled), "--solution", str(sol)]) == 2
    assert f"--solution {sol}: details.memory_model = 'autograd' is not a memory model" in _one_line(capsys)


# ----------------------------------------------------------------------------- 2. edited provenance that ran
def _edited(profiled, tmp_path, edit) -> Path:
    d = json.loads(profiled.read_text())
    edit(d["provenance"])
    bad = tmp_path / "edited.json"
    bad.write_text(json.dumps(d))
    return bad


@pytest.mark.parametrize("keep_cuts", [True, False])
def test_an_edited_batch_is_refused_by_the_traced_sizes(keep_cuts, profiled, tmp_path, capsys):
    """batch 2 edited to 3 (valid, so it traced into the recorded stages) ran, its tensors 1.5x the
    recorded ones, against the replay of the recorded sizes (exit 0). The input's bytes by hand:
    3 x 3 x 32 x 32 float32 = 36864 B traced, 2 x ... = 24576 B recorded; without the provenance's
    cuts record (older files) a^0 is compared with the input."""
    def edit(p):
        p["batch"] = 3
        if not keep_cuts:
            del p["cuts"]

    bad = _edited(profiled, tmp_path, edit)
    assert main(["run", str(bad), "--time-budget", "0.5"]) == 2
    err = _one_line(capsys)
    assert err.startswith(f"memplan: error: {bad}: the network rebuilt from provenance.batch = 3, "), err
    tensor = "x" if keep_cuts else "a^0"
    assert (f"cut 0's tensor {tensor} is 36864 B traced now, 24576 B recorded (every recorded size is as at "
            "batch 2); profile the network again with 'memplan profile'") in err


@pytest.mark.parametrize("release, what", [([99], "stage 99 is outside 1..{n}"), ([-5], "stage -5 is outside 1..{n}"),
                                           ([1, 1], "stage 1 is given twice"), ([1.5], "not a list of stage numbers")])
def test_free_backward_release_out_of_range_is_named(release, what, profiled, tmp_path, capsys):
    """provenance.free_backward.release = [-5] ran (exit 0), charging a^{L-4} (index -5 from the end) in
    'memplan solve --free-backward'; [99] was an IndexError traceback there."""
    L = len(json.loads(profiled.read_text())["stages"]) - 2
    bad = _edited(profiled, tmp_path, lambda p: p["free_backward"].update(release=release))
    want = f"provenance.free_backward.release = {release!r}: " + what.format(n=L + 1)
    assert main(["run", str(bad), "--time-budget", "0.5"]) == 2
    assert want in _one_line(capsys)
    assert main(["solve", str(bad), "--memory", "1GiB", "--free-backward", "-q"]) == 2
    err = _one_line(capsys)
    assert err.startswith(f"memplan: error: --free-backward: {bad}: {want}") and "profile the network again" in err


# ----------------------------------------------------------------------------- 3. a batch that cannot fit
def test_a_batch_that_cannot_fit_is_refused_before_allocating(tmp_path, capsys, one_torch_thread):
    """--batch 1000000 allocated until the OOM killer came (or, its input alone too large to allocate,
    ended in a traceback). The input's bytes by hand: 10^6 x 3 x 224 x 224 float32."""
    import time

    out = tmp_path / "x.json"
    t0 = time.perf_counter()
    assert main(["profile", "--model", "resnet18", "--batch", "1000000", "-o", str(out)]) == 2
    err = _one_line(capsys)
    assert err.startswith("memplan: error: --batch 1000000: a training step of resnet18 on input 3x224x224 needs at "
                          "least "), err
    assert "(602112000000 B of input and " in err and "scaled from batches 2 and 4" in err
    most = int(re.search(r"give --batch (\d+) or less$", err).group(1))
    assert 1 <= most < 1000000 and not out.exists()
    assert time.perf_counter() - t0 < 60


def test_the_step_estimate_is_the_measured_growth_and_below_the_step(one_torch_thread):
    """step_memory_estimate's step bytes grow with the batch as a measured autograd step's peak does
    (the tracker's, at batches 8 and 16: linear in the batch), and stay below that peak (what does not
    grow with the batch, the weight gradients' temporaries, is left out): never a refusal of what fits."""
    from memplan.models.memory import grad_input, step_peak
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss, step_memory_estimate

    torch.manual_seed(0)
    model, loss_fn = get_model("resnet18").train(), classification_loss()
    measured = {}
    for b in (8, 16):
        x = grad_input(example_input("resnet18", b, (3, 32, 32)))
        measured[b] = step_peak(lambda: loss_fn(model(x)).backward(), list(model.parameters()), "cpu", "dispatch")
    est = {b: step_memory_estimate("resnet18", b, (3, 32, 32)) for b in (8, 16)}
    assert est[8]["input"] == 8 * 3 * 32 * 32 * 4
    assert est[16]["step"] - est[8]["step"] == pytest.approx(measured[16] - measured[8], rel=0.01)
    assert 0 < est[16]["step"] < measured[16] and est[8]["step"] < measured[8]


def test_the_batch_check_refuses_only_past_the_memory_available(monkeypatch):
    """The same batch passes with the estimate's bytes available (plus 1%) and is refused 1% short of
    them; nothing is measured for a batch of 4 or less (its input alone is compared)."""
    import memplan.models.profiler as prof
    from memplan.experiments.cli_checks import batch_fits
    from memplan.models.solution import InputError

    est = prof.step_memory_estimate("resnet18", 64, (3, 32, 32))
    need = est["input"] + est["step"]
    monkeypatch.setattr(prof, "available_memory", lambda device="cpu": need * 1.01)
    batch_fits("resnet18", 64, (3, 32, 32), "cpu", {})
    monkeypatch.setattr(prof, "available_memory", lambda device="cpu": need * 0.99)
    with pytest.raises(InputError, match=r"^--batch 64: a training step of resnet18 on input 3x32x32 needs at least"):
        batch_fits("resnet18", 64, (3, 32, 32), "cpu", {})
    small = prof.step_memory_estimate("resnet18", 4, (3, 32, 32))
    assert small["step"] == 0 and small["batches"] is None and small["input"] == 4 * 3 * 32 * 32 * 4


# ----------------------------------------------------------------------------- 4. an instance not written
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_profile_that_cannot_be_written_names_the_file(tmp_path, capsys, one_torch_thread):
    """-o on a full disk (a name linked to /dev/full): 'memplan: error: No space left on device', after
    the whole profile, no file named (tests/test_write_errors.py: the other commands)."""
    out = tmp_path / "r.json"
    out.symlink_to("/dev/full")
    assert main(["profile", *PROFILE, "--repeats", "1", "--timing-budget", "0", "--force", "-o", str(out)]) == 2
    assert _one_line(capsys) == f"memplan: error: cannot write {out}: No space left on device"


# ----------------------------------------------------------------------------- 5. --set given twice
def test_a_set_key_given_twice_is_refused_by_profile(tmp_path, capsys):
    """profile took the last of two values silently (a GPT-2 of 2 layers for n_layer=1 then 2)."""
    out = tmp_path / "g.json"
    assert main(["profile", *TINY_GPT2, "--set", "n_layer=1", "--set", "n_layer=2", "-o", str(out)]) == 2
    assert _one_line(capsys) == ("memplan: error: --set n_layer: given 2 times (--set n_layer=1 --set n_layer=2); "
                                 "give each key once")
    assert not out.exists()


def test_model_kwargs_is_the_shared_check():
    from memplan.experiments.cli_checks import model_kwargs
    from memplan.models.solution import InputError

    assert model_kwargs([("a", 1), ("b", "x")]) == {"a": 1, "b": "x"}
    assert model_kwargs(None) == {}
    with pytest.raises(InputError, match=r"--set a: given 3 times \(--set a=1 --set a=2 --set a=1\)"):
        model_kwargs([("a", 1), ("b", 2), ("a", 2), ("a", 1)])
