import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from memplan.experiments.cli import main

from conftest import ROOT

TOY = str(ROOT / "instances" / "paper004_table2.json")


def test_readme_main_job(capsys, tmp_path):
    out_json = tmp_path / "s.json"
    rc = main(["solve", TOY, "--problem", "remat", "--memory", "90MiB", "--method", "rotor", "--json", str(out_json)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "makespan     47.4 ms" in out and "peak memory  86.8 MiB" in out
    assert "F_ck^1 F_∅^2 F_∅^3 F_all^4..F_all^7 B^7..B^4" in out
    sol = json.loads(out_json.read_text())
    assert sol["objective"] == pytest.approx(0.04742)
    assert sol["peak_memory"] == pytest.approx(86.75 * 2**20)
    assert sol["schedule"][:3] == [["F_ck", 1], ["F_none", 2], ["F_none", 3]]
    assert {op for op, _ in sol["schedule"]} <= {"F_all", "F_ck", "F_none", "B"}


def test_store_all_report(capsys):
    assert main(["solve", TOY, "--memory", "1GiB", "--method", "store-all"]) == 0
    out = capsys.readouterr().out
    assert "makespan     37.4 ms" in out and "107.0 MiB" in out


def test_infeasible_memory_states_minimum(capsys):
    assert main(["solve", TOY, "--memory", "50MiB", "--method", "rotor-floating", "--slots", "100"]) == 2
    err = capsys.readouterr().err
    assert "minimum feasible memory is 82.1 MiB" in err


def test_bad_unit_and_method(capsys):
    assert main(["solve", TOY, "--memory", "90 furlongs"]) == 2
    assert "unknown memory unit" in capsys.readouterr().err
    assert main(["solve", TOY, "--memory", "90MiB", "--method", "magic"]) == 2
    assert "unknown method 'magic'" in capsys.readouterr().err


def test_bad_instance_file(tmp_path, capsys):
    p = tmp_path / "bad.json"
    d = json.loads(open(TOY).read())
    d["stages"][2]["u_b"] = -3
    p.write_text(json.dumps(d))
    assert main(["solve", str(p), "--memory", "90MiB"]) == 2
    err = capsys.readouterr().err
    assert "bad.json" in err and "stages[2].u_b" in err


def test_sweep_writes_csv_and_plot(tmp_path):
    out = tmp_path / "toy"
    assert main(["sweep", "remat", "--instance", TOY, "--points", "4", "--out", str(out),
                 "--methods", "rotor,revolve"]) == 0
    df = pd.read_csv(out.with_suffix(".csv"))
    assert out.with_suffix(".png").stat().st_size > 10_000
    ok = df[df.makespan.notna()]
    assert (ok.peak_memory <= ok.memory_limit * (1 + 1e-9)).all()
    # at each limit rotor is at least as fast as revolve
    piv = ok.pivot_table(index="memory_limit", columns="method", values="makespan")
    both = piv.dropna(subset=["rotor", "revolve"])
    assert len(both) >= 2 and (both["rotor"] <= both["revolve"] + 1e-12).all()
    # resuming does not duplicate rows
    assert main(["sweep", "remat", "--instance", TOY, "--points", "4", "--out", str(out),
                 "--methods", "rotor,revolve"]) == 0
    assert len(pd.read_csv(out.with_suffix(".csv"))) == len(df)


def test_console_script_installed():
    """The `memplan` console script of the installed distribution (not `python -m`)."""
    exe = shutil.which("memplan", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                        os.environ.get("PATH", "")]))
    assert exe is not None, "the memplan console script is not installed"
    r = subprocess.run([exe, "show", "paper004_table2"], capture_output=True, text=True)
    assert r.returncode == 0 and "linear3_2800x2900" in r.stdout


def test_options_the_problem_does_not_take_are_refused(capsys):
    assert main(["solve", TOY, "--memory", "90MiB", "--periodicity", "3"]) == 2
    err = capsys.readouterr().err
    assert "--periodicity is not an option of --problem remat" in err and "--slots" in err
    assert main(["solve", TOY, "--memory", "90MiB", "--gantt", "x.png"]) == 2
    assert "--gantt" in capsys.readouterr().err


def test_time_limit_must_be_positive(capsys):
    assert main(["solve", TOY, "--memory", "90MiB", "--time-limit", "-1"]) == 2
    assert "time_limit" in capsys.readouterr().err
