"""The README's user flow (``memplan profile`` -> ``memplan solve`` -> ``memplan run``) probed across zoo
models, options, methods and limits: the cases where ``memplan run``'s measured peak was not its
prediction. Each runs the flow end to end, reading the two peaks ``memplan run`` prints in bytes."""
import re

import pytest

from memplan.experiments import cmd_profile
from memplan.experiments.cli import main

pytestmark = pytest.mark.torch

# a tiny encoder-decoder Transformer (the auto rule cuts it where several tensors cross): its first
# stage splits the ids into source and target, the target ids (a view of the input) read stages later
TINY_TRANSFORMER = ["--model", "transformer", "--set", "vocab=20", "--set", "d_model=8", "--set", "n_head=2",
                    "--set", "d_ff=16", "--set", "n_enc=2", "--set", "n_dec=2", "--set", "src_len=4",
                    "--set", "n_ctx=8", "--batch", "2", "--input", "7"]


def _peaks(capsys, monkeypatch, argv) -> tuple[int, int]:
    """(measured, simulated) peak bytes of ``memplan run argv``."""
    monkeypatch.setattr(cmd_profile, "fmt_memory", lambda b: f"<{b:.0f} B>")
    capsys.readouterr()
    assert main(["run", *argv]) == 0
    out = capsys.readouterr().out
    m = re.search(r"peak memory +measured[^<]*<(\d+) B> +simulated <(\d+) B>", out)
    assert m, out
    return int(m.group(1)), int(m.group(2))


@pytest.mark.parametrize("plan", ["store-all", "rotor-least"])
def test_a_resident_view_of_the_input_is_not_charged_twice(plan, tmp_path, capsys, monkeypatch, one_torch_thread):
    """The target ids (``ids[:, src_len:]``) are resident: no storage of their own, the input's. The
    profile charged the input's storage again in ``Chain.resident``, so every plan ran below its
    prediction by the ids' bytes (512 B at batch 2 x 32 tokens; 112 B here), the least-memory plan too
    (a limit no plan could reach by those bytes). Measured against simulated, to the byte."""
    inst = tmp_path / "t.json"
    assert main(["profile", *TINY_TRANSFORMER, "--threads", "1", "--repeats", "1", "--timing-budget", "0",
                 "-o", str(inst)]) == 0
    argv = [str(inst), "--time-budget", "0.2"]
    if plan == "rotor-least":
        assert main(["solve", str(inst), "--problem", "remat", "--method", "rotor", "--memory", "1", "-q"]) != 0
        err = capsys.readouterr().err
        least = re.search(r"\((\d+) B\) is enough", err) or re.search(r"minimum feasible memory is .*?\((\d+) B\)", err)
        assert least, err
        sol = tmp_path / "sol.json"
        assert main(["solve", str(inst), "--problem", "remat", "--method", "rotor", "--memory", least.group(1),
                     "-q", "--json", str(sol)]) == 0
        argv += ["--solution", str(sol)]
    measured, simulated = _peaks(capsys, monkeypatch, argv)
    assert measured == simulated


TINY_LLAMA = ["--model", "llama", "--batch", "2", "--input", "64", "--set", "vocab=512", "--set", "n_ctx=64",
              "--set", "n_layer=2", "--set", "d_model=96", "--set", "n_head=4"]


@pytest.mark.parametrize("turn_model", [False, True], ids=["papers-times", "turn-model"])
def test_a_recomputing_plan_under_its_simulation_is_explained(turn_model, tmp_path, capsys, one_torch_thread):
    """recompute-all on a tiny Llama profiled without the turn model ran 18-37% under its simulation on
    the re-timed stages (each no-grad forward charged F_all's time, tape included), unexplained;
    ``memplan run`` now says why and what to profile with. With ``--turn-model`` the no-grad forwards are
    timed in context and the note is not given."""
    inst, sol = tmp_path / "l.json", tmp_path / "ra.json"
    assert main(["profile", *TINY_LLAMA, "--threads", "1", "-o", str(inst)]
                + (["--turn-model"] if turn_model else [])) == 0
    assert main(["solve", str(inst), "--problem", "remat", "--method", "recompute-all", "--memory", "1GiB", "-q",
                 "--json", str(sol)]) == 0
    capsys.readouterr()
    assert main(["run", str(inst), "--solution", str(sol), "--time-budget", "2"]) == 0
    out = capsys.readouterr().out
    m = re.search(r"simulated on the stages re-timed in these rounds .*\(([-+]\d+\.\d)%\)", out)
    assert m, out
    noted = "this instance has no turn model" in out
    if turn_model:
        assert not noted, out
    else:
        assert float(m.group(1)) < -5 and noted, out
