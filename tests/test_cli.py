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
    argv = ["sweep", "remat", "--instance", TOY, "--points", "4", "-o", str(out), "--methods", "rotor,revolve",
            "--workers", "1", "--csv", "-q"]
    assert main(argv) == 0
    df = pd.read_csv(out / "results.csv")
    assert (out / "remat_paper004-table2.png").stat().st_size > 10_000
    ok = df[df.objective.notna()]
    assert (ok.peak_memory <= ok.memory_limit * (1 + 1e-9)).all()
    # at each limit rotor is at least as fast as revolve
    piv = ok.pivot_table(index="memory_limit", columns="method", values="objective")
    both = piv.dropna(subset=["rotor", "revolve"])
    assert len(both) >= 2 and (both["rotor"] <= both["revolve"] + 1e-12).all()
    # resuming does not duplicate rows
    assert main(argv) == 0
    assert len(pd.read_csv(out / "results.csv")) == len(df) == 8


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
    # --bandwidth too, in the command line's words (it had been the API's: "takes no bandwidth (it has
    # memory, method, time_limit, ...)")
    assert main(["solve", TOY, "--memory", "90MiB", "--bandwidth", "1GB/s"]) == 2
    err = capsys.readouterr().err
    assert "--bandwidth is not an option of --problem remat (its options: --memory, --slots" in err
    assert main(["solve", TOY, "--memory", "90MiB", "--gantt", "x.png"]) == 2
    assert "--gantt" in capsys.readouterr().err


def test_time_limit_must_be_positive(capsys):
    assert main(["solve", TOY, "--memory", "90MiB", "--time-limit", "-1"]) == 2
    assert "time_limit" in capsys.readouterr().err


# ---------------------------------------------------------------- bad input: exit 2, one line naming it
def _refused(capsys, argv, *names):
    """``memplan ARGV`` exits with status 2 and prints one line (no traceback) that names ``names``."""
    rc = main(argv)
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert rc == 2, (rc, cap.out[-500:], cap.err[-500:])
    assert len(lines) == 1 and lines[0].startswith("memplan: error: ") and "Traceback" not in cap.err, cap.err
    for name in names:
        assert name in lines[0], lines[0]
    return lines[0]


def _toy_with(tmp_path, edit):
    d = json.loads(open(TOY).read())
    edit(d)
    p = tmp_path / "edited.json"
    p.write_text(json.dumps(d))
    return str(p)


def test_typo_in_a_stage_field_is_refused(tmp_path, capsys):
    """Issue 18: ``u_bb`` for ``u_b`` was accepted with u_b = 0 (store-all 32.9 ms instead of 37.4 ms)."""
    p = _toy_with(tmp_path, lambda d: d["stages"][2].update(u_bb=d["stages"][2].pop("u_b")))
    _refused(capsys, ["solve", p, "--memory", "1GiB", "--method", "store-all"],
             "edited.json", "field 'stages[2].u_bb'", "unknown field; did you mean 'u_b'?")
    _refused(capsys, ["show", p], "field 'stages[2].u_bb'")


def test_absurd_size_is_refused(tmp_path, capsys):
    """Issue 18: a size of 1e300 ended in an IndexError traceback."""
    p = _toy_with(tmp_path, lambda d: d["stages"][3].update(a=1e300))
    _refused(capsys, ["solve", p, "--memory", "90MiB"], "edited.json", "field 'stages[3].a'",
             "out of range", "1e+15 bytes")


def test_typo_on_the_real_command_line(tmp_path):
    """The console script itself: status 2, one line on stderr, no traceback."""
    p = _toy_with(tmp_path, lambda d: d["stages"][4].update(o_bb=d["stages"][4].pop("o_b")))
    exe = shutil.which("memplan", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                        os.environ.get("PATH", "")]))
    r = subprocess.run([exe, "solve", p, "--memory", "90MiB"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "field 'stages[4].o_bb': unknown field; did you mean 'o_b'?" in r.stderr


def test_huge_slot_count_is_refused(capsys):
    """Issue 18: ``--slots 100000000`` (remat) ended in a MemoryError traceback."""
    _refused(capsys, ["solve", TOY, "--memory", "90MiB", "--method", "rotor", "--slots", "100000000", "--quiet"],
             "slots")


@pytest.mark.parametrize("gpus", ["0", "-3"])
def test_non_positive_gpus_are_refused(gpus, capsys):
    """Issue 18: ``--gpus 0`` was solved and reported as "GPUs 0"; ``--gpus -3`` printed "max() arg is
    an empty sequence"."""
    _refused(capsys, ["solve", TOY, "--problem", "pipeline", "--memory", "600MiB", "--bandwidth", "12GB/s",
                      "--gpus", gpus, "--quiet"], "gpus", gpus)


def test_zero_bandwidth_is_refused(capsys):
    """Issue 18: ``--bandwidth 0GB/s`` said "no bandwidth is known"."""
    _refused(capsys, ["solve", TOY, "--problem", "offload", "--memory", "80MiB", "--bandwidth", "0GB/s", "--quiet"],
             "bandwidth", "0GB/s", "positive")


def test_show_a_solution_file_prints_its_report(tmp_path, capsys):
    """``memplan show SOLUTION.json``: the saved solution's report on the instance it records (paper 004's
    toy at 90 MiB: 47.4 ms, 86.8 MiB, as solved), refused on another chain, one line; before, the file was
    read as an instance and refused with every field of the solution listed as unknown."""
    from memplan.experiments.cli import main

    toy = ROOT / "instances" / "paper004_table2.json"
    sol = tmp_path / "sol.json"
    assert main(["solve", str(toy), "--memory", "90MiB", "--method", "rotor", "--json", str(sol), "-q"]) == 0
    capsys.readouterr()
    assert main(["show", str(sol)]) == 0
    out = capsys.readouterr().out
    assert "makespan     47.4 ms" in out and "peak memory  86.8 MiB" in out
    other = ROOT / "instances" / "resnet18-b8-224-cpu.json"
    assert main(["show", str(sol), "--chain", str(other)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "solved on paper004-table2 (L = 6)" in err and "another chain" in err


def test_sizes_that_would_exhaust_the_memory_are_refused(capsys, tmp_path):
    """A sweep over random:100000000 (a chain of 12 GB of arrays) or with --n-batches 1e9 (15 GB of eager
    1F1B start times) was ended by the OOM killer after minutes: both are refused in one line, as the API
    refuses them."""
    common = ["--bandwidth", "12GB/s", "--gpus", "2", "--points", "2", "--methods", "pipedream", "--workers", "1",
              "--no-plot", "-q", "--fresh", "--time-limit", "5", "-o", str(tmp_path / "s")]
    _refused(capsys, ["sweep", "pipeline", "--random", "100000000", *common], "L=100000000", "more than 1000000")
    _refused(capsys, ["sweep", "pipeline", "--random", "6", "--n-batches", "1000000000", *common],
             "n_batches=1000000000", "between 8 and 100000")
    import memplan

    with pytest.raises(ValueError, match="more than 1000000 stages"):
        memplan.random_chain(10**8)
    with pytest.raises(memplan.InputError, match="n_batches=1000000000 is out of range"):
        memplan.pipeline.solve(memplan.random_chain(4), memory=1e9, bandwidth="12GB/s", gpus=2, method="pipedream",
                               n_batches=10**9)


def test_an_option_the_chosen_method_does_not_read_is_refused(capsys, tmp_path):
    """--gap with rotor, --slots with greedy, --periodicity with the ILP: accepted and ignored before (the
    answer as if the flag were not there); refused in one line naming who reads it. A sweep refuses a
    flag none of its methods reads, and keeps one that some method reads."""
    _refused(capsys, ["solve", TOY, "--memory", "90MiB", "--method", "rotor", "--gap", "0.1"],
             "--gap is not read by --method rotor", "remat-milp, checkmate", "--slots, --exact")
    _refused(capsys, ["solve", TOY, "--problem", "offload", "--memory", "80MiB", "--bandwidth", "1GB/s",
                      "--method", "greedy", "--slots", "50"], "--slots is not read by --method greedy", "dynprog, milp")
    _refused(capsys, ["solve", TOY, "--problem", "pipeline", "--memory", "80MiB", "--bandwidth", "1GB/s", "--gpus",
                      "2", "--method", "ilp", "--periodicity", "3"], "--periodicity is not read by --method ilp",
             "cyclic")
    run = ["--instance", TOY, "--points", "2", "--workers", "1", "--no-plot", "-q", "--fresh"]
    _refused(capsys, ["sweep", "remat", "--methods", "rotor", "--gap", "0.5", *run, "-o", str(tmp_path / "a")],
             "--gap: read by none of the methods rotor")
    assert main(["sweep", "remat", "--methods", "rotor,remat-milp", "--gap", "0.5", "--time-limit", "5", *run,
                 "-o", str(tmp_path / "b")]) == 0
    rows = pd.read_csv(tmp_path / "b" / "results.csv")
    assert set(rows["method"]) == {"rotor", "remat-milp"}
    assert all(json.loads(o) == ({"gap": 0.5} if m == "remat-milp" else {}) for m, o in zip(rows["method"], rows["options"]))


def test_an_option_given_twice_is_refused(capsys, tmp_path):
    """argparse keeps the last of two values: --memory 90MiB --memory 100MiB solved at 100 MiB, and
    memplan sweep -o A remat ... -o B wrote to B, without a word. Refused; options that collect repeat."""
    for argv, what in ((["solve", TOY, "--memory", "90MiB", "--memory", "100MiB"], "--memory: given twice"),
                       (["sweep", "-o", str(tmp_path / "a"), "remat", "--instance", TOY, "--points", "2",
                         "-o", str(tmp_path / "b")], "-o: given twice")):
        with pytest.raises(SystemExit) as e:
            main(argv)
        err = capsys.readouterr().err.strip()
        assert e.value.code == 2 and err.count("\n") == 0 and what in err and "give it once" in err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    assert main(["sweep", "remat", "--instance", TOY, "--points", "2", "--methods", "rotor", "--workers", "1",
                 "--no-plot", "-q", "--option", "slots=100", "--option", "exact=false", "-o", str(tmp_path / "c")]) == 0


@pytest.mark.parametrize("argv, what", [
    (["profile", "--model", "resnet18", "--batch", "2", "--input", "3x32x32", "--seed", "-1", "-o", "x.json"],
     "--seed '-1': give a whole number from 0"),                     # taken before (budget refused it)
    (["profile", "--model", "resnet18", "--batch", "2", "--input", "3x32x32", "--seed", "99999999999999999999",
      "-o", "x.json"], "--seed '99999999999999999999'"),              # 'Overflow when unpacking long long'
    (["profile", "--model", "resnet18", "--batch", "2", "--input", "3x32x32", "--name", "", "-o", "x.json"],
     "--name '': an empty name"),                                     # the default name instead
    (["import-pipedream", "instances/pipedream/resnet18.graph.txt", "--name", " ", "-o", "x.json"],
     "--name '': an empty name"),
])
def test_empty_names_and_seeds_torch_cannot_take_are_refused(argv, what, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    argv = [str(tmp_path / a) if a == "x.json" else a for a in argv]
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.count("\n") == 0 and what in err
    assert not (tmp_path / "x.json").exists()


def test_an_empty_sweep_folder_is_refused_not_the_default(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _refused(capsys, ["sweep", "remat", "--instance", TOY, "--points", "2", "--workers", "1", "--no-plot", "-q",
                      "-o", ""], "-o/--out '': an empty folder name", "results/remat")
    assert not (tmp_path / "results").exists()


def test_an_instance_output_that_is_a_folder_says_so_first(capsys, tmp_path):
    """memplan import-pipedream -o FOLDER said 'exists; pass --force', and with --force that it is a folder."""
    _refused(capsys, ["import-pipedream", str(ROOT / "instances" / "pipedream" / "resnet18.graph.txt"), "-o",
                      str(tmp_path)], "is a folder; give a file name")


def test_an_edited_solution_file_is_refused_in_its_own_terms(capsys, tmp_path):
    """A solution file without its problem had been read as an instance ("field 'method': unknown field"),
    and one with a NaN peak printed 'peak memory nan TiB'."""
    sol = tmp_path / "s.json"
    assert main(["solve", TOY, "--memory", "90MiB", "--json", str(sol), "-q"]) == 0
    capsys.readouterr()
    data = json.loads(sol.read_text())
    no_problem, nan_peak = tmp_path / "np.json", tmp_path / "nan.json"
    no_problem.write_text(json.dumps({k: v for k, v in data.items() if k != "problem"}))
    nan_peak.write_text(json.dumps({**data, "peak_memory": float("nan")}))
    _refused(capsys, ["show", str(no_problem)], "a solution needs problem")
    _refused(capsys, ["show", str(nan_peak)], "peak_memory = nan: not a finite number")
