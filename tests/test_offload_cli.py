"""``memplan solve --problem offload`` end to end on the toy chain of paper 004."""
import json

import pytest

from memplan import offload
from memplan.experiments.cli import main


@pytest.mark.parametrize("method", ["lb", "greedy", "dynprog", "vdnn", "autoswap", "milp"])
def test_cli_methods(method, tmp_path, capsys):
    out = tmp_path / "sol.json"
    rc = main(["solve", "instances/paper004_table2.json", "--problem", "offload", "--memory", "80MiB",
               "--bandwidth", "1GB/s", "--method", method, "--time-limit", "20", "--json", str(out)]
              + (["--threads", "1"] if method == "milp" else []))       # the others do not read it (refused)
    text = capsys.readouterr().out
    assert "lower bound" in text
    data = json.loads(out.read_text())
    if method == "lb":
        assert rc == 0 and data["bound"] > 0 and data["schedule"] is None   # a bound, not a schedule
    else:
        assert rc == 0 and "ratio to LB" in text and "timeline" in text
        assert data["schedule"]["offloaded"] and data["objective"] >= data["bound"] * (1 - 1e-9)


def test_cli_errors(capsys):
    assert main(["solve", "instances/paper004_table2.json", "--problem", "offload", "--memory", "10MiB",
                 "--bandwidth", "1GB/s"]) == 2
    assert "minimum feasible memory" in capsys.readouterr().err
    assert main(["solve", "instances/paper004_table2.json", "--problem", "offload", "--memory", "80MiB"]) == 2
    assert "bandwidth" in capsys.readouterr().err


def test_methods_registry():
    assert offload.METHODS == ["lb", "greedy", "dynprog", "vdnn", "tflms", "autoswap", "milp"]
    assert offload.DEFAULT_METHOD in offload.METHODS


def test_cli_gantt(tmp_path, capsys):
    """The README's command with --gantt: the chart is drawn by memplan.offload.gantt."""
    png = tmp_path / "offload.png"
    rc = main(["solve", "instances/paper004_table2.json", "--problem", "offload", "--memory", "80MiB",
               "--bandwidth", "1GB/s", "--method", "milp", "--threads", "1", "--gantt", str(png), "--quiet"])
    out = capsys.readouterr()
    assert rc == 0 and f"Gantt chart  {png}" in out.out and out.err == ""
    assert png.stat().st_size > 10_000
