"""``memplan budget``: a zoo network's training step within a byte budget from the shell."""
import re

import pytest

pytest.importorskip("torch")

from memplan.experiments.cli import main  # noqa: E402

TINY = ["--model", "gpt2", "--batch", "2", "--input", "32", "--set", "n_layer=2", "--set", "n_embd=32",
        "--set", "n_head=2", "--set", "vocab=100", "--set", "n_ctx=32", "--fractions", "1",
        "--no-compiled-stages", "--repeats", "1"]


def _bytes(text: str) -> float:
    v, unit = re.match(r"([\d.]+) (B|KiB|MiB|GiB)", text).groups()
    return float(v) * {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]


def test_budget_refused_below_the_minimum_which_then_works(capsys, one_torch_thread):
    assert main(["budget", *TINY, "--memory", "100KiB"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("memplan: error: memory 100.0 KiB is below every measured peak")
    least = int(re.search(r"the smallest is (\d+) bytes", err).group(1))
    assert least > 100 * 2**10
    # the stated minimum is a budget that works: the chosen step's measured peak fits it
    assert main(["budget", *TINY, "--memory", str(least)]) == 0
    out = capsys.readouterr().out
    chosen = re.search(r"chose .*\(peak ([\d.]+ \w+), step", out)
    assert chosen and _bytes(chosen.group(1)) <= least * (1 + 1e-3)     # the report rounds to 0.1 of a unit
    assert "pytorch fraction 1" in out and "chain rotor" in out


def test_budget_bad_model_argument_is_one_line(capsys):
    assert main(["budget", "--model", "gpt2", "--batch", "1", "--memory", "1GiB", "--set", "bogus=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("memplan: error: model gpt2: no option 'bogus'; it takes vocab, n_ctx, n_layer, n_embd, n_head, "
                   "dropout, tie_weights (given: bogus=1)")


def test_budget_progress_lines_on_request_and_no_profiler_noise():
    """--progress: one line per part of the search on stderr (the fraction compiled, the chain
    profiled), the report on stdout; the profiler's own start/stop lines (Kineto writes them to file
    descriptor 2 at every CPU memory window) do not reach stderr. Run as a user runs it, in a process
    of its own: inside the test process torch was imported before the command could quiet c10's log,
    and garbage of earlier tests freed inside a measured window wrote c10's warning about it (seen
    once in a fresh clone's run, depending on which tests the worker ran first)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "memplan.experiments.cli", "budget", *TINY, "--memory", "1GiB",
                           "--progress"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    out, err = done.stdout, done.stderr
    lines = err.strip().splitlines()
    assert lines and all(line.startswith("memplan budget: ") for line in lines), lines
    assert any(re.match(r"memplan budget: fraction 1 \(pytorch\): compiled in [\d.]+ s, peak ", line) for line in lines)
    assert any(line.startswith("memplan budget: chain: L = ") for line in lines)
    assert "USDT" not in err and "budget 1.0 GiB: chose" in out


def test_budget_offload_on_a_cpu_is_one_line(capsys):
    assert main(["budget", *TINY, "--memory", "1GiB", "--offload"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "memplan: error: --offload needs --device cuda: on a CPU the host is the same memory, nothing would be saved"


@pytest.mark.parametrize("bad", ["1,1.5", "0.5,0.5", "half", ""])
def test_budget_bad_stage_fractions_are_one_line(capsys, bad):
    with pytest.raises(SystemExit) as e:
        main(["budget", *TINY, "--memory", "1GiB", "--stage-fractions", bad])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--stage-fractions" in err and "distinct numbers in [0, 1]" in err


def test_budget_zero_is_refused_before_any_search(capsys):
    """--memory 0 ran the whole search (29 s on the README's GPT-2) before refusing it; the API refuses
    it before it builds anything too."""
    import time

    from memplan import compile_under_budget
    from memplan.models.solution import InputError

    t0 = time.perf_counter()
    assert main(["budget", *TINY, "--memory", "0"]) == 2
    assert time.perf_counter() - t0 < 5
    err = capsys.readouterr().err.strip()
    assert err == "memplan: error: --memory '0': the budget must be a positive, finite quantity, e.g. 300MiB"
    with pytest.raises(InputError, match=r"memory 0 must be a positive quantity"):
        compile_under_budget(None, (), 0)


def test_budget_refusal_says_when_the_time_limit_cut_the_search(capsys, one_torch_thread):
    """A time limit that stops the search after the first fraction: the refusal says the smallest peak is
    among the candidates measured before it, what was not tried, and that a longer limit may find smaller
    ones (it said "give at least that" while the chain plans, untried, fit far lower)."""
    assert main(["budget", *TINY, "--memory", "1KiB", "--time-limit", "0.001"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith("memplan: error: memory 1.0 KiB is below every peak measured before time_limit=0.001 s "
                          "stopped the search (1 candidate(s) measured; not tried: chain plans): the smallest is ")
    assert err.endswith("; a longer time_limit may find smaller ones") and "give at least" not in err
    cut = int(re.search(r"the smallest is (\d+) bytes", err).group(1))
    # with the time to try them, the chain plans go below it; the refusal then says to give at least that
    assert main(["budget", *TINY, "--memory", "1KiB"]) == 2
    err = capsys.readouterr().err.strip()
    assert "is below every measured peak" in err and "give at least that" in err
    assert int(re.search(r"the smallest is (\d+) bytes", err).group(1)) < cut


def test_budget_batch_that_cannot_fit_is_refused_before_the_search(capsys, one_torch_thread):
    """memplan budget --batch 1000000 on ResNet-18 (224x224): its input alone is 10^6 x 3 x 224 x 224
    float32 = 602112000000 bytes, more than this machine has; refused in one line with that figure before
    a model of that batch is built (as memplan profile does), not after a search that cannot allocate."""
    import time

    t0 = time.perf_counter()
    assert main(["budget", "--model", "resnet18", "--batch", "1000000", "--memory", "1GiB"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith("memplan: error: --batch 1000000: a training step of resnet18 on input 3x224x224 needs at "
                          "least ") and "(602112000000 B of input and " in err
    assert re.search(r"give --batch \d+ or less$", err)
    assert time.perf_counter() - t0 < 60


def test_budget_under_autocast(capsys, one_torch_thread):
    """``--autocast bfloat16``: the search runs inside one autocast block (the compiled fractions, the
    chain's profile and plans), the report says so, and the chosen step fits; a dtype autocast does not
    take is one line."""
    assert main(["budget", *TINY, "--memory", "64MiB", "--autocast", "bfloat16"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith("under torch.autocast(bfloat16)")
    chosen = re.search(r"chose .*\(peak ([\d.]+ \w+), step", out)
    assert chosen and _bytes(chosen.group(1)) <= 64 * 2**20 and "chain rotor" in out
    with pytest.raises(SystemExit) as e:
        main(["budget", *TINY, "--memory", "64MiB", "--autocast", "int8"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--autocast" in err and "bfloat16" in err


@pytest.mark.parametrize("cmd", ["profile", "budget"])
def test_an_input_whose_one_sample_cannot_fit_is_refused_without_making_it(cmd, capsys, tmp_path):
    """--input 3x100000x100000: one sample is 120 GB; the size check had made a sample to measure it and
    ended in c10's 'can't allocate memory' traceback. The bytes are worked out from the shape now."""
    args = (["-o", str(tmp_path / "p.json")] if cmd == "profile" else ["--memory", "1GiB"])
    assert main([cmd, "--model", "resnet18", "--batch", "2", "--input", "3x100000x100000", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "(240000000000 B of input)" in err and err.endswith("give a smaller --input")
