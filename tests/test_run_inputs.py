"""Bad input to ``memplan run`` and ``memplan profile``: one line on stderr naming the file or option and
what would work, exit status 2; never a traceback or a silent default."""
import json

import pytest

torch = pytest.importorskip("torch")

from memplan.experiments.cli import main  # noqa: E402

PROFILE = ["--model", "resnet18", "--batch", "2", "--input", "3x32x32", "--threads", "1"]
TINY_GPT2 = ["--set", "n_layer=1", "--set", "n_embd=32", "--set", "n_head=2", "--set", "vocab=100"]


@pytest.fixture(scope="module")
def profiled(tmp_path_factory, one_torch_thread):
    """A ResNet-18 instance made by 'memplan profile' (batch 2, 3x32x32: 5 s on one thread)."""
    path = tmp_path_factory.mktemp("run") / "r18.json"
    assert main(["profile", *PROFILE, "-o", str(path)]) == 0
    return path


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


def test_a_solution_without_a_schedule_is_named(profiled, tmp_path, capsys):
    """A Solution written for an infeasible limit (status infeasible, schedule null) crashed with
    ``TypeError: 'NoneType' object is not iterable``."""
    sol = tmp_path / "inf.json"
    assert main(["solve", str(profiled), "--memory", "1KiB", "--json", str(sol), "-q"]) == 2
    capsys.readouterr()
    assert json.loads(sol.read_text())["schedule"] is None
    assert main(["run", str(profiled), "--solution", str(sol)]) == 2
    err = _one_line(capsys)
    assert f"--solution {sol}: has no schedule (status infeasible: no valid sequence fits" in err


@pytest.mark.parametrize("problem", [
    ["--problem", "pipeline", "--gpus", "2", "--memory", "1GiB", "--bandwidth", "12GB/s", "--method", "pipedream"],
    ["--problem", "offload", "--memory", "1GiB", "--bandwidth", "1GB/s", "--method", "greedy"]])
def test_another_problems_solution_is_named(problem, profiled, tmp_path, capsys):
    """A pipeline or offloading Solution has a schedule that is no sequence (TypeError, 'too many values
    to unpack (expected 2)')."""
    sol = tmp_path / "other.json"
    assert main(["solve", str(profiled), *problem, "--json", str(sol), "-q"]) == 0
    capsys.readouterr()
    assert main(["run", str(profiled), "--solution", str(sol)]) == 2
    assert _one_line(capsys) == (f"memplan: error: --solution {sol}: a remat solution with a schedule is needed; "
                                 f"this one is problem '{problem[1]}' (solve with --problem remat)")


def test_an_instance_or_an_empty_file_as_solution_is_named(profiled, tmp_path, capsys):
    """An instance file as the solution (KeyError: 'schedule'), an empty file (the JSON error without
    the file's name)."""
    assert main(["run", str(profiled), "--solution", str(profiled)]) == 2
    assert f"--solution {profiled}: an instance file; give a Solution" in _one_line(capsys)
    empty = tmp_path / "empty.json"
    empty.write_text("")
    assert main(["run", str(profiled), "--solution", str(empty)]) == 2
    assert f"--solution {empty}: not a JSON file (empty)" in _one_line(capsys)


def test_a_solution_of_another_instance_is_refused_and_an_old_one_still_runs(profiled, tmp_path, capsys):
    """A Solution records the instance it was solved on (name, L, sha256 of the chain's arrays); run
    refuses it on another one (it ran, to a peak over the limit it was solved for), naming both.
    A Solution without the record (written before it existed) runs as before."""
    sol = tmp_path / "a.json"
    assert main(["solve", str(profiled), "--memory", "1GiB", "--json", str(sol), "-q"]) == 0
    rec = json.loads(sol.read_text())["instance"]
    assert rec["name"] == "resnet18-b2-3x32x32-cpu" and rec["L"] > 1 and len(rec["sha256"]) == 64
    other = tmp_path / "b.json"
    data = json.loads(profiled.read_text())
    data["name"] = "other"
    data["stages"][3]["abar"] *= 4
    other.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["run", str(other), "--solution", str(sol)]) == 2
    err = _one_line(capsys)
    assert (f"--solution {sol}: solved on instance 'resnet18-b2-3x32x32-cpu' ({profiled}), L = {rec['L']}, "
            f"sha256 {rec['sha256'][:12]}, not on {other}: 'other', L = {rec['L']}, sha256 ") in err
    assert err.endswith(f"; solve {other} again")
    # the same instance, read again: the same fingerprint
    assert main(["run", str(profiled), "--solution", str(sol), "--time-budget", "1"]) == 0
    old = json.loads(sol.read_text())
    del old["instance"]
    sol.write_text(json.dumps(old))
    capsys.readouterr()
    assert main(["run", str(other), "--solution", str(sol), "--time-budget", "1"]) == 0
    assert "peak memory  measured" in capsys.readouterr().out


@pytest.mark.parametrize("args,what", [
    (["--model", "resnet18", "--batch", "2", "--input", "3x32"],
     "resnet18 cannot run on input 3x32 (batch 2): Given groups=1"),
    (["--model", "resnet18", "--batch", "2", "--input", "4x32x32"],
     "resnet18 cannot run on input 4x32x32 (batch 2): Given groups=1"),
    (["--model", "resnet18", "--batch", "1", "--input", "3x32x32"],
     "resnet18 cannot run on input 3x32x32 (batch 1): Expected more than 1 value per channel"),
    (["--model", "gpt2", "--batch", "2", "--input", "3x32x32", *TINY_GPT2],
     "gpt2 cannot run on input 3x32x32 (batch 2): "),
    (["--model", "gpt2", "--batch", "2", "--input", "2000", *TINY_GPT2],
     "gpt2 cannot run on input 2000 (batch 2): index out of range in self; the sequence is longer than the "
     "model's n_ctx = 1024: give --input 1024 or less (or --set n_ctx=2000)")])
def test_an_input_the_model_cannot_take_is_one_line(args, what, tmp_path, capsys, one_torch_thread):
    """A wrong --input (rank, channels, one value per batch-norm channel, an image for GPT-2, a sequence
    past n_ctx) printed torch.fx's chained tracebacks."""
    assert main(["profile", *args, "-o", str(tmp_path / "x.json")]) == 2
    err = _one_line(capsys)
    assert err.startswith(f"memplan: error: {what}")
    assert not (tmp_path / "x.json").exists()


def test_budget_input_the_model_cannot_take_is_one_line(capsys, one_torch_thread):
    assert main(["budget", "--model", "resnet18", "--batch", "2", "--input", "3x32", "--memory", "10MiB"]) == 2
    assert _one_line(capsys).startswith("memplan: error: resnet18 cannot run on input 3x32 (batch 2): Given groups=1")


@pytest.mark.parametrize("verb,flag,value", [("profile", "--threads", "-1"), ("profile", "--threads", "0"),
                                             ("profile", "--repeats", "0"), ("run", "--threads", "-1")])
def test_threads_and_repeats_below_one_are_refused(verb, flag, value, profiled, tmp_path, capsys):
    """--threads -1 was a RuntimeError traceback, --threads 0 silently ignored, --repeats 0 silently 3."""
    args = ([verb, *PROFILE[:-2], "-o", str(tmp_path / "x.json")] if verb == "profile" else [verb, str(profiled)])
    with pytest.raises(SystemExit) as e:
        main([*args, flag, value])
    assert e.value.code == 2
    assert f"argument {flag}: '{value}': give a whole number >= 1" in _one_line(capsys)
    assert not (tmp_path / "x.json").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a torch that sees a CUDA device")
def test_run_on_cuda_without_one_is_one_line(profiled, capsys):
    """An AssertionError traceback ('Torch not compiled with CUDA enabled'); profile and budget said so."""
    assert main(["run", str(profiled), "--sequence", "store-all", "--device", "cuda"]) == 2
    assert _one_line(capsys) == (f"memplan: error: --device cuda: this torch ({torch.__version__}) sees no CUDA "
                                 "device; use --device cpu")


def test_allocator_events_on_a_multi_cut_network_size_its_plans_exactly(tmp_path, capsys, monkeypatch,
                                                                       one_torch_thread):
    """``--memory-method profiler`` on a network the auto rule cuts where several tensors cross (a
    Transformer) had been refused (c10's events sized single-tensor cuts only); the multi-tensor
    profile now reads them too, and ``memplan run``, measuring by the same events, finds store-all's
    and the least-memory plan's peaks at their replays' (8 bytes). On a U-Net the dispatch sizes had
    left 36 MiB of a convolution backward's scratch out of a plan's prediction."""
    import re

    from memplan.experiments import cmd_profile

    small = ["--set", "vocab=200", "--set", "d_model=64", "--set", "n_head=2", "--set", "d_ff=128", "--set",
             "n_enc=2", "--set", "n_dec=2", "--set", "src_len=32", "--set", "n_ctx=64"]
    out = tmp_path / "t.json"
    assert main(["profile", "--model", "transformer", *small, "--batch", "2", "--input", "64", "--repeats", "1",
                 "--threads", "1", "--memory-method", "profiler", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["solve", str(out), "--problem", "remat", "--method", "rotor", "--memory", "1", "-q"]) != 0
    least = re.search(r"\((\d+) B\) is enough", capsys.readouterr().err)
    assert least
    sol = tmp_path / "sol.json"
    assert main(["solve", str(out), "--problem", "remat", "--method", "rotor", "--memory", least.group(1), "-q",
                 "--json", str(sol)]) == 0
    monkeypatch.setattr(cmd_profile, "fmt_memory", lambda b: f"<{b:.0f} B>")
    for argv in (["--sequence", "store-all"], ["--solution", str(sol)]):
        capsys.readouterr()
        assert main(["run", str(out), *argv, "--time-budget", "0.2"]) == 0
        text = capsys.readouterr().out
        m = re.search(r"peak memory +measured \(c10 allocator events\) <(\d+) B> +simulated <(\d+) B>", text)
        assert m, text
        assert abs(int(m.group(1)) - int(m.group(2))) <= 8, text


@pytest.mark.parametrize("field, value, needle", [
    ("network", "nosuch", "provenance.network"), ("batch", -2, "provenance.batch"), ("batch", 0, "provenance.batch"),
    ("model_kw", [1, 2], "provenance.model_kw"), ("seed", "abc", "provenance.seed"),
    ("threads", "x", "provenance.threads"), ("free_backward", "x", "provenance.free_backward"),
])
def test_an_edited_provenance_is_one_line_naming_the_field(field, value, needle, profiled, tmp_path, capsys):
    """memplan run rebuilds the network from the instance's provenance: an edited field gave a
    KeyError/TypeError/RuntimeError traceback (or, batch 0, ran an empty batch, exit 0)."""
    d = json.loads(profiled.read_text())
    d["provenance"][field] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    assert main(["run", str(bad), "--time-budget", "1"]) == 2
    line = _one_line(capsys)
    assert needle in line and str(bad) in line, line


def test_a_schedule_with_a_fractional_stage_is_refused_and_an_over_limit_plan_is_said_so(profiled, tmp_path,
                                                                                       capsys):
    """A stage 1.5 was cut to stage 1 silently; a limit_exceeded plan (Checkmate's rounding) ran as if
    it were one within its limit."""
    sol = tmp_path / "s.json"
    assert main(["solve", str(profiled), "--method", "sequential", "--memory", "100MiB", "--json", str(sol),
                 "-q"]) == 0
    d = json.loads(sol.read_text())
    d["schedule"][0][1] = 1.5
    frac = tmp_path / "frac.json"
    frac.write_text(json.dumps(d))
    capsys.readouterr()
    assert main(["run", str(profiled), "--solution", str(frac)]) == 2
    assert "not a whole number" in _one_line(capsys)
    d = json.loads(sol.read_text())
    d.update(status="limit_exceeded", memory_limit=1000.0)
    over = tmp_path / "over.json"
    over.write_text(json.dumps(d))
    assert main(["run", str(profiled), "--solution", str(over), "--time-budget", "1"]) == 0
    err = capsys.readouterr().err
    assert "status limit_exceeded" in err and "1000 B" in err, err


def test_a_count_given_as_a_boolean_is_refused():
    """--set n_layer=false built a GPT-2 with no block (exit 0), n_layer=true one of 1."""
    from memplan.models.networks import get_model

    for v in (False, True):
        with pytest.raises(ValueError, match="n_layer"):
            get_model("gpt2", n_layer=v, n_embd=32, n_head=2, vocab=100, n_ctx=16)


def test_free_backward_chain_takes_an_instance(profiled):
    """free_backward_chain(memplan.load_instance(...)) raised AttributeError ('Instance' has no provenance)."""
    import memplan
    from memplan.models.remat import free_backward_chain

    inst = memplan.load_instance(profiled)
    got, want = free_backward_chain(inst), free_backward_chain(inst.chain)
    assert got.L == want.L and list(got.ob) == list(want.ob)


def test_profile_and_run_under_autocast(tmp_path, capsys, one_torch_thread):
    """``memplan profile --autocast bfloat16`` records the dtype; ``memplan run`` runs the plan and plain
    autograd under it (each step's forward in its own block, the backward after it) and measures the
    plan's peak as simulated, to the byte (before the executor left autocast's weight cache on, the
    bfloat16 weights, 22 MiB at this size, lived to the end of every step, 1.4-2.7x the replay); an
    edited record is one line naming it."""
    path = tmp_path / "amp.json"
    assert main(["profile", *PROFILE, "--autocast", "bfloat16", "-o", str(path)]) == 0
    capsys.readouterr()
    data = json.loads(path.read_text())
    assert data["provenance"]["autocast"] == "bfloat16"
    assert main(["run", str(path), "--sequence", "sequential:2", "--time-budget", "1", "--threads", "1",
                 "--check-grads"]) == 0
    out = capsys.readouterr().out
    assert "peak memory  measured" in out and "(+0.0%)" in out.split("peak memory", 1)[1].split("\n", 1)[0], out
    assert "bit-identical to plain autograd" in out
    data["provenance"]["autocast"] = "int8"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    assert main(["run", str(bad), "--time-budget", "1"]) == 2
    assert "provenance.autocast = 'int8' cannot be used (one of bfloat16, float16)" in _one_line(capsys)
