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
    assert err == ("memplan: error: model gpt2: GPT2.__init__() got an unexpected keyword argument 'bogus' "
                   "(given: bogus=1)")


def test_budget_progress_lines_on_request_and_no_profiler_noise(capfd, one_torch_thread):
    """--progress: one line per part of the search on stderr (the fraction compiled, the chain
    profiled), the report on stdout; the profiler's own start/stop lines (Kineto writes them to file
    descriptor 2 at every CPU memory window) do not reach stderr."""
    assert main(["budget", *TINY, "--memory", "1GiB", "--progress"]) == 0
    out, err = capfd.readouterr()
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
