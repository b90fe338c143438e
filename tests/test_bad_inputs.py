"""Bad inputs and faults of issue 29 (defects 2-8): each is one line on stderr and exit status 2 (an
error of the Python API), caught before any solve, never a traceback, a hang or a silent default."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import memplan
from conftest import ROOT
from memplan.experiments.cli import build_parser, main
from memplan.models.instance import InstanceError, load_instance
from memplan.models.pipedream import PipeDreamFormatError, import_graph
from memplan.models.solution import InputError

PD = ROOT / "instances" / "pipedream"
TOY = str(ROOT / "instances" / "paper004_table2.json")


def _run(argv, capsys):
    """``memplan ARGV`` in this process: (exit status, stdout, stderr)."""
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _one_line(err: str) -> str:
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _cli(*args, timeout=60, **kw):
    return subprocess.run([sys.executable, "-m", "memplan.experiments.cli", *args], capture_output=True,
                          text=True, timeout=timeout, **kw)


@pytest.fixture
def no_solve(monkeypatch):
    """Fails the test if memplan.solve is reached (the checks must come before it)."""
    def boom(*a, **k):
        raise AssertionError("memplan.solve was called although an output path is bad")
    monkeypatch.setattr(memplan, "solve", boom)


# ----------------------------------------------------------------------------- defect 2: import-pipedream
def test_a_profile_cut_short_is_refused(tmp_path, capsys):
    """`head -n 120 resnet18.graph.txt` used to import as L = 1 (the pieces joined by virtual nodes)."""
    lines = (PD / "resnet18.graph.txt").read_text().splitlines(keepends=True)
    cut = tmp_path / "cut.graph.txt"
    cut.write_text("".join(lines[:120]))
    with pytest.raises(PipeDreamFormatError, match="cut short"):
        import_graph(cut)
    rc, _, err = _run(["import-pipedream", str(cut), "-o", str(tmp_path / "x.json")], capsys)
    assert rc == 2 and str(cut) in _one_line(err)
    assert not (tmp_path / "x.json").exists()
    # nodes without any edge line, and the whole file: 23 stages
    nodes = tmp_path / "nodes.graph.txt"
    nodes.write_text("".join(l for l in lines if not l.startswith("\t")))
    with pytest.raises(PipeDreamFormatError, match="no edge"):
        import_graph(nodes)
    assert import_graph(PD / "resnet18.graph.txt").L == 23


def test_two_inputs_feeding_separate_towers_still_import(tmp_path):
    """Pieces are refused only when no Input feeds them: two towers, one input each, are a network."""
    node = "{} -- {} -- forward_compute_time=1.0, backward_compute_time=2.0, activation_size=8.0, parameter_size=0.0\n"
    text = (node.format("node1", "Input") + node.format("node2", "Linear(a)") + node.format("node3", "Input")
            + node.format("node4", "Linear(b)") + "\tnode1 -- node2\n\tnode3 -- node4\n")
    p = tmp_path / "towers.graph.txt"
    p.write_text(text)
    c = import_graph(p)
    assert c.store_all_time() == pytest.approx(2 * 3e-3)      # two Linear nodes, 1 + 2 ms each
    assert c.wa[0] == 16.0                                     # both inputs are a^0


@pytest.mark.parametrize("batch", ["0", "-8"])
def test_import_batch_below_one_names_the_option(batch, tmp_path, capsys):
    """--batch 0 wrote an all-zero chain recorded as batch 128; -8 blamed Chain.uf[1]."""
    with pytest.raises(SystemExit) as e:
        main(["import-pipedream", str(PD / "resnet18.graph.txt"), "--batch", batch, "-o", str(tmp_path / "x.json")])
    assert e.value.code == 2
    line = _one_line(capsys.readouterr().err)
    assert "--batch" in line and "uf" not in line
    with pytest.raises(InputError, match="batch=0"):
        import_graph(PD / "resnet18.graph.txt", batch=0)
    c = import_graph(PD / "resnet18.graph.txt", batch=8)
    assert c.provenance["batch"] == 8 and c.name.endswith("-b8")


# ----------------------------------------------------------------------------- defect 3: --workers
@pytest.mark.parametrize("workers,where", [("-3", "after"), ("0", "before")])
def test_sweep_workers_below_one_is_an_error_not_a_hang(workers, where, tmp_path):
    """--workers -3 hung forever; --workers 0 silently meant one per core."""
    args = ["sweep", "remat", "--instance", TOY, "--points", "2", "-o", str(tmp_path / "s"), "-q", "--no-plot"]
    args = args[:2] + ["--workers", workers] + args[2:] if where == "after" else \
        args[:1] + ["--workers", workers] + args[1:]
    r = _cli(*args, timeout=60)
    assert r.returncode == 2 and "--workers" in _one_line(r.stderr)
    assert not (tmp_path / "s" / "results").exists()


def test_run_sweep_refuses_zero_workers(tmp_path):
    from memplan.experiments.sweep_engine import run_sweep

    with pytest.raises(InputError, match="workers=0"):
        run_sweep([], {}, tmp_path, workers=0, progress=False)


# ----------------------------------------------------------------------------- defect 4: operating-system errors
def test_a_folder_as_instance(tmp_path, capsys):
    with pytest.raises(InstanceError, match="is a folder"):
        load_instance(tmp_path)
    for verb in (["solve", str(tmp_path), "--memory", "90MiB"], ["show", str(tmp_path)]):
        rc, _, err = _run(verb, capsys)
        assert rc == 2 and str(tmp_path) in _one_line(err)


def test_an_unreadable_instance_names_the_file(tmp_path, monkeypatch, capsys):
    path = tmp_path / "toy.json"
    path.write_text(Path(TOY).read_text())
    real = Path.read_bytes

    def denied(self):
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)
    monkeypatch.setattr(Path, "read_bytes", denied)
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: denied(self).decode())
    with pytest.raises(InstanceError, match="cannot read.*Permission denied"):
        load_instance(path)
    rc, _, err = _run(["solve", str(path), "--memory", "90MiB"], capsys)
    assert rc == 2 and str(path) in _one_line(err)


def _unwritable_dir(tmp_path) -> Path:
    """A folder nothing can be written in: read-only for a user; /proc (no new files) for root."""
    if os.geteuid() != 0:
        d = tmp_path / "ro"
        d.mkdir()
        d.chmod(0o555)
        return d
    if not Path("/proc/self").is_dir():
        pytest.skip("running as root without /proc: no folder is read-only for root here")
    return Path("/proc")


@pytest.mark.parametrize("flag", ["--json", "--gantt", "--solver-log"])
def test_outputs_are_checked_before_the_solve(flag, tmp_path, capsys, no_solve):
    base = ["solve", TOY, "--memory", "90MiB"] + (["--problem", "offload", "--bandwidth", "1GB/s"]
                                                  if flag == "--gantt" else []) + (
        ["--method", "remat-milp"] if flag == "--solver-log" else [])      # a method that writes one
    afile = tmp_path / "a.txt"
    afile.write_text("x")
    for bad, what in ((tmp_path, "is a folder"), (afile / "x.out", "is a file"),
                      (afile / "sub" / "x.out", "is a file"), (_unwritable_dir(tmp_path) / "x.out", "cannot")):
        rc, out, err = _run(base + [flag, str(bad)], capsys)
        line = _one_line(err)
        assert rc == 2 and flag in line and what in line, line
        assert out == ""


def test_outputs_get_their_folders_and_the_log_is_written(tmp_path, capsys):
    """--json and --solver-log into folders that do not exist yet: made (the log was silently lost)."""
    sol, log = tmp_path / "new" / "dir" / "sol.json", tmp_path / "logs" / "h.log"
    # checkmate always runs HiGHS (remat-milp may prove its start by the DP bound without a MILP)
    rc, out, _ = _run(["solve", TOY, "--memory", "90MiB", "--method", "checkmate", "--threads", "1",
                       "--time-limit", "30", "--json", str(sol), "--solver-log", str(log), "-q"], capsys)
    assert rc == 0
    data = json.loads(sol.read_text())
    # optimal in Checkmate's model only: FEASIBLE, its MILP's status kept
    assert data["status"] == "feasible" and data["details"]["milp_status"] == "optimal"
    assert data["objective"] == pytest.approx(0.04742, abs=5e-6)
    assert "HiGHS" in log.read_text()


def test_other_commands_check_their_output_folders(tmp_path, capsys):
    afile = tmp_path / "a.txt"
    afile.write_text("x")
    rc, _, err = _run(["sweep", "remat", "--instance", TOY, "--points", "2", "--workers", "1", "-q",
                       "-o", str(afile / "s")], capsys)
    assert rc == 2 and "-o" in _one_line(err)
    rc, _, err = _run(["import-pipedream", str(PD / "resnet18.graph.txt"), "-o", str(afile / "x.json")], capsys)
    assert rc == 2 and "-o" in _one_line(err)
    rc, _, err = _run(["plot", str(tmp_path), "--figure", "remat", "-o", str(afile / "f")], capsys)
    assert rc == 2 and "Traceback" not in err


# ----------------------------------------------------------------------------- defect 6: the results folder
def _toy_sweep(out, capsys):
    return _run(["sweep", "remat", "--instance", TOY, "--methods", "store-all,recompute-all", "--memory",
                 "100MiB,110MiB", "--workers", "1", "-q", "--no-plot", "-o", str(out)], capsys)


def test_a_stray_parquet_file_is_left_out_with_a_warning(tmp_path, capsys):
    import pandas as pd

    from memplan.experiments.sweep_engine import read_results

    assert _toy_sweep(tmp_path, capsys)[0] == 0
    pd.DataFrame({"x": [1, 2, 3]}).to_parquet(tmp_path / "results" / "notes.parquet")
    with pytest.warns(UserWarning, match="notes.parquet"):
        df = read_results(tmp_path)
    assert len(df) == 4 and df["status"].notna().all()
    with pytest.warns(UserWarning, match="notes.parquet"):
        rc, _, err = _toy_sweep(tmp_path, capsys)
    assert rc == 0 and "0 solved now" in err
    assert len(pd.read_csv(tmp_path / "results.csv")) == 4
    from memplan.experiments.cli_checks import _warning_line       # how the command line shows it: one line

    assert _warning_line("x", UserWarning, "f.py", 1) == "memplan: warning: x\n"


def test_a_truncated_part_is_named_with_the_way_out(tmp_path, capsys):
    assert _toy_sweep(tmp_path, capsys)[0] == 0
    part = sorted((tmp_path / "results").glob("part-*.parquet"))[0]
    part.write_bytes(part.read_bytes()[:40])
    rc, _, err = _toy_sweep(tmp_path, capsys)
    line = _one_line(err)
    assert rc == 2 and part.name in line and "delete it" in line
    part.unlink()                               # as the message says: only that task is solved again
    rc, _, err = _toy_sweep(tmp_path, capsys)
    assert rc == 0 and "1 solved now" in err


# ----------------------------------------------------------------------------- defect 7: messages
def test_non_utf8_files_are_named(tmp_path, capsys):
    bad = tmp_path / "latin1.json"
    bad.write_bytes(Path(TOY).read_text().replace('"input"', '"entr\u00e9e"').encode("latin-1"))
    with pytest.raises(InstanceError, match="latin1.json.*UTF-8"):
        load_instance(bad)
    g = tmp_path / "latin1.graph.txt"
    g.write_bytes((PD / "resnet18.graph.txt").read_text().replace("Input", "Entr\u00e9e", 1).encode("latin-1"))
    rc, _, err = _run(["import-pipedream", str(g), "-o", str(tmp_path / "x.json")], capsys)
    assert rc == 2 and "latin1.graph.txt" in _one_line(err) and "UTF-8" in err


def test_a_negative_memory_is_explained_not_taken_for_an_option(capsys):
    rc, _, err = _run(["solve", TOY, "--memory", "-1MiB"], capsys)
    line = _one_line(err)
    assert rc == 2 and "negative" in line and "expected one argument" not in line


def test_a_negative_bandwidth_is_called_a_bandwidth(capsys):
    rc, _, err = _run(["solve", TOY, "--problem", "offload", "--memory", "80MiB", "--bandwidth", "-5GB/s"], capsys)
    line = _one_line(err)
    assert rc == 2 and "bandwidth '-5GB/s' is negative" in line and "memory '-5" not in line
    from memplan.models.units import UnitError, parse_bandwidth

    with pytest.raises(UnitError, match="unknown bandwidth unit"):
        parse_bandwidth("5XB/s")


def test_the_option_list_names_only_options_solve_takes(capsys):
    solve_flags = {f for a in build_parser()._subparsers._group_actions[0].choices["solve"]._actions
                   for f in a.option_strings}
    rc, _, err = _run(["solve", TOY, "--problem", "pipeline", "--memory", "1GiB", "--slots", "3"], capsys)
    line = _one_line(err)
    listed = line.split("its options: ")[1].rstrip(")").split(", ")
    assert rc == 2 and listed and set(listed) <= solve_flags
    assert not {"--n-batches", "--points", "--allocations", "--refine", "--starts"} & set(listed)


def test_a_closed_pipe_ends_quietly(tmp_path):
    """`memplan show ... | head -1` ended in a BrokenPipeError traceback."""
    from test_long_chains import write_instance

    inst = tmp_path / "long.json"
    write_instance(3000, inst)            # a table far larger than a pipe's buffer
    p = subprocess.Popen([sys.executable, "-m", "memplan.experiments.cli", "show", str(inst), "--rows", "5000"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read().decode()
    rc = p.wait(timeout=60)
    assert first.startswith(b"chain3000") and "Traceback" not in err and "BrokenPipe" not in err, err
    assert rc == 141


@pytest.mark.parametrize("kw", [{"memory": True}, {"memory": "80MiB", "bandwidth": True}])
def test_booleans_are_not_quantities(kw):
    chain, _ = load_instance("paper004_table2")
    with pytest.raises(InputError, match="True is not a quantity"):
        memplan.solve(chain, "offload", "dynprog", **{"bandwidth": "1GB/s", **kw})



@pytest.mark.parametrize("problem, method, kw", [
    ("remat", "remat-milp", dict(memory="95MiB")), ("offload", "milp", dict(memory="90MiB", bandwidth="1GB/s")),
    ("pipeline", "ilp", dict(memory="1GiB", bandwidth="1GB/s", gpus=2)),
])
@pytest.mark.parametrize("gap", [False, True])
def test_a_boolean_gap_is_not_a_gap(problem, method, kw, gap):
    """gap=False was taken as float(False) = 0, a gap of zero (the MILP then runs to a proof); True as 1.0
    was refused as 'out of range'. Both are refused as not numbers, naming the gap."""
    with pytest.raises(InputError, match=rf"^{problem}: gap={gap} must be a number \(a relative MILP gap"):
        memplan.solve("paper004_table2", problem, method, gap=gap, time_limit=5, **kw)


@pytest.mark.parametrize("problem, kw", [
    ("remat", dict(method="checkmate", memory="95MiB")), ("offload", dict(method="milp", memory="90MiB", bandwidth="1GB/s")),
    ("pipeline", dict(memory="1GiB", bandwidth="1GB/s", gpus=2)),
])
def test_a_solver_log_that_cannot_be_written_is_named_before_the_solve(problem, kw, tmp_path):
    """HiGHS given a log in a missing folder wrote nothing and said nothing (the Solution came back as if
    logged); a number was taken as a file name ('3' in the working folder)."""
    for bad, why in ((tmp_path / "no" / "such" / "h.log", "cannot write there, no folder"),
                     (tmp_path, "is a folder; give a file name"), (3, "must be a file name"), ("", "must be a file name"),
                     (True, "must be a file name")):
        with pytest.raises(InputError, match=rf"^{problem}: solver_log=.*{re.escape(why)}"):
            memplan.solve("paper004_table2", problem, solver_log=bad, time_limit=5, **kw)
    if problem == "remat":          # a path that works is still HiGHS's log (Checkmate's MILP runs on the toy)
        log = tmp_path / "h.log"
        assert memplan.solve("paper004_table2", problem, solver_log=log, time_limit=5, **kw).success
        assert "HiGHS" in log.read_text()

def test_quiet_silences_the_highs_banner():
    """checkmate runs HiGHS ("MILP optimal"), whose first instance in a process prints its banner
    (without -q, to stderr)."""
    r = _cli("solve", TOY, "--memory", "90MiB", "--method", "checkmate", "--threads", "1", "-q")
    assert r.returncode == 0 and "optimal" in r.stdout and "MILP optimal" in r.stdout
    assert "HiGHS" not in r.stderr and "HiGHS" not in r.stdout


@pytest.mark.parametrize("progress", [False, True])
def test_a_library_call_without_progress_prints_no_banner(progress):
    """From Python, HiGHS's banner (printed by its first instance of a process, at the C level) goes
    nowhere unless the call shows progress; then it goes to stderr with the progress lines."""
    code = ("import memplan\n"
            "c = memplan.random_chain(5, seed=1)\n"
            "s = memplan.solve(c, 'remat', 'checkmate', memory=memplan.remat.memory_range(c)[1] * 0.7,\n"
            f"                  time_limit=20, threads=1{', progress=print' if progress else ''})\n"
            "print('status', s.status)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "status feasible" in r.stdout, r.stderr      # checkmate: optimal in its model
    assert "Running HiGHS" not in r.stdout
    assert ("Running HiGHS" in r.stderr) == progress, r.stderr


# ----------------------------------------------------------------------------- defect 8: the figure scripts
@pytest.mark.parametrize("module,args", [
    ("pipeline_figures", ["--pipedream", "wrong/path.txt", "--batch", "8", "--gpus", "4"]),
    ("remat_sweep", ["--instance", "wrong/path.json"]),
])
def test_figure_scripts_report_a_wrong_path_in_one_line(module, args, tmp_path):
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", f"memplan.experiments.{module}", *args, "-o", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "wrong/path" in _one_line(r.stderr)
    assert time.perf_counter() - t0 < 60


def test_the_api_names_a_path_it_cannot_write(tmp_path):
    chain, _ = load_instance("paper004_table2")
    sol = memplan.solve(chain, "remat", "rotor", memory="90MiB")
    with pytest.raises(InputError, match=f"^cannot write {re.escape(str(tmp_path))}: "):
        sol.write_json(tmp_path)
    with pytest.raises(InputError, match=f"^cannot write {re.escape(str(tmp_path / 'missing' / 'x.json'))}: No such file"):
        sol.write_json(tmp_path / "missing" / "x.json")


@pytest.mark.parametrize("flag", ["--json", "--gantt", "--solver-log"])
def test_an_empty_output_name_is_an_error_not_no_file(flag, capsys, no_solve):
    """``--json ''`` was taken as 'no file' (nothing written, exit 0)."""
    base = ["solve", TOY, "--memory", "90MiB", "--problem", "offload", "--bandwidth", "1GB/s"] + (
        ["--method", "milp"] if flag == "--solver-log" else [])
    rc, out, err = _run(base + [flag, ""], capsys)
    assert rc == 2 and out == "" and _one_line(err).endswith(f"{flag}: an empty file name; give one, e.g. results/out")


@pytest.mark.parametrize("name, what", [("g.xyz", "extension '.xyz'"), ("g", "no extension")])
def test_a_gantt_chart_name_matplotlib_cannot_write_is_refused_before_the_solve(name, what, tmp_path, capsys, no_solve):
    """The drawing comes after the solve: 'g.xyz' failed after the report, 'g' became 'g.png'."""
    base = ["solve", TOY, "--memory", "90MiB", "--problem", "offload", "--bandwidth", "1GB/s"]
    rc, out, err = _run(base + ["--gantt", str(tmp_path / name)], capsys)
    line = _one_line(err)
    assert rc == 2 and out == "" and f"{what}; give an image file name ending in one of" in line
    assert ".png" in line and ".pdf" in line and not list(tmp_path.iterdir())


def test_show_rows_below_one_names_the_option(capsys):
    with pytest.raises(SystemExit) as e:
        main(["show", TOY, "--rows", "-1"])
    assert e.value.code == 2 and "argument --rows: '-1': give a whole number >= 1" in capsys.readouterr().err


def test_instances_that_cannot_be_chains(tmp_path, capsys):
    """JSON nested past the decoder's recursion limit, a chain of the input and the loss alone (L = 0:
    every problem's methods failed on it with index or division errors), no name at all; the Python
    API refuses what is not a path."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    rc, _, err = _run(["show", str(deep)], capsys)
    assert rc == 2 and _one_line(err).endswith("deep.json: not an instance: its JSON is nested too deeply to read")
    doc = json.loads(Path(TOY).read_text())
    doc["stages"] = [doc["stages"][0], dict(doc["stages"][-1], stage=1)]
    l0 = tmp_path / "l0.json"
    l0.write_text(json.dumps(doc))
    rc, _, err = _run(["solve", str(l0), "--memory", "90MiB"], capsys)
    assert rc == 2 and "field 'stages': List should have at least 3 items" in _one_line(err)
    with pytest.raises(ValueError, match=r"random_chain: L=0 must be a whole number >= 1"):
        memplan.random_chain(0)
    toy = memplan.load_instance("paper004_table2").chain
    with pytest.raises(ValueError, match=r"at least one stage besides the loss \(L >= 1: len\(wa\) >= 3, got 2\)"):
        memplan.Chain(**{f: getattr(toy, f)[:2] for f in ("uf", "ub", "wa", "wabar", "wd", "of", "ob", "weights")})
    rc, _, err = _run(["show", ""], capsys)
    assert rc == 2 and "no instance given: name a file (instances/*.json) or a shipped instance (" in _one_line(err)
    for bad in (None, 5, b"instances/paper004_table2.json"):
        with pytest.raises(TypeError, match="an instance is a file path or a shipped instance's name"):
            load_instance(bad)


def test_the_python_api_names_what_it_cannot_take(tmp_path):
    """Raw numpy, int() and call errors became messages naming the argument; save_instance takes the
    Instance that load_instance gives (it failed on it with an AttributeError)."""
    inst = memplan.load_instance("paper004_table2")
    back = memplan.load_instance(memplan.save_instance(inst, tmp_path / "toy.json"))
    assert back.platform == inst.platform and back.chain.L == 6
    assert back.chain.store_all_time() == pytest.approx(inst.chain.store_all_time())
    with pytest.raises(TypeError, match="chain must be a Chain or an Instance, not str"):
        memplan.save_instance("paper004_table2", tmp_path / "x.json")
    for kw, arg in ((dict(L=-1), "L=-1"), (dict(L="5"), "L='5'"), (dict(L=2.5), "L=2.5"),
                    (dict(L=3, max_size=0), "max_size=0"), (dict(L=3, max_time=0), "max_time=0")):
        with pytest.raises(ValueError, match=f"random_chain: {arg} must be a whole number >= 1"):
            memplan.random_chain(**kw)
    with pytest.raises(InputError, match="progress=5 must be a function of one line of text"):
        memplan.solve(inst, "remat", memory="90MiB", progress=5)
    with pytest.raises(InputError, match="time_limit=True must be a number of seconds"):
        memplan.solve(inst, "remat", memory="90MiB", time_limit=True)
    given = memplan.solve(inst, "remat", memory="90MiB", method="rotor", slots="1e3")
    assert given.objective == memplan.solve(inst, "remat", memory="90MiB", method="rotor", slots=1000).objective



@pytest.mark.parametrize("kw, arg", [
    (dict(seed=-1), "seed=-1 must be a whole number >= 0"), (dict(seed="a"), "seed='a' must be a whole number >= 0"),
    (dict(seed=1.5), "seed=1.5 must be"), (dict(seed=True), "seed=True must be"),
    (dict(forward_overhead_scale=-1), "forward_overhead_scale=-1 must be a finite number >= 0"),
    (dict(forward_overhead_scale="2"), "forward_overhead_scale='2' must be"),
    (dict(forward_overhead_scale=float("nan")), "forward_overhead_scale=nan must be"),
])
def test_random_chain_names_a_bad_seed_or_scale(kw, arg):
    """numpy's errors named neither argument (seed=-1: 'expected non-negative integer'; a string scale: a
    ufunc type error), and a negative scale read 'Chain.of[1] = -3 is out of range'."""
    import numpy as np

    with pytest.raises(ValueError, match=f"^random_chain: {re.escape(arg)}"):
        memplan.random_chain(3, **kw)
    # what works: a numpy seed is the same chain as the int, a scale of 2 doubles the forward overheads
    assert memplan.random_chain(3, seed=np.int64(4)) == memplan.random_chain(3, seed=4)
    assert (memplan.random_chain(3, seed=4, forward_overhead_scale=2).of == 2 * memplan.random_chain(3, seed=4).of).all()

def test_below_the_resident_bytes_the_message_gives_the_whole_minimum():
    """A chain whose resident tensors alone exceed the limit: the inner solve ran at 1 B and its message
    ('no valid sequence fits in 1 B: the minimum feasible memory is 82.1 MiB ... planned under 0 B')
    named neither the limit given nor the minimum that works."""
    import dataclasses

    from memplan.models.solution import Status

    toy = memplan.load_instance("paper004_table2").chain
    alone = memplan.solve(toy, "remat", memory="50MiB", method="rotor")
    r = 1000 * 2**20
    sol = memplan.solve(dataclasses.replace(toy, resident=r), "remat", memory="90MiB", method="rotor")
    assert alone.status == sol.status == Status.INFEASIBLE
    need = alone.details["min_memory"] + r
    assert sol.details["min_memory"] == pytest.approx(need)
    assert sol.message == (f"nothing fits in 90.0 MiB ({90 * 2**20} B): the minimum feasible memory is 1.1 GiB "
                           f"({need:.12g} B), of which 1000.0 MiB of resident tensors (Chain.resident: tensors "
                           "crossing two or more cuts and their gradients), charged for the whole step")


@pytest.mark.parametrize("argv", [
    ["profile", "--model", "resnet18", "--batch", "2", "--input", "3x64x64", "-o", "OUT/r.json"],
    ["budget", "--model", "gpt2", "--batch", "2", "--input", "64", "--memory", "20MiB"],
])
def test_a_command_that_needs_torch_says_how_to_install_it(argv, tmp_path):
    """Without PyTorch (the README's first command does not install it) ``profile``, ``run`` and
    ``budget`` print one line naming the package and the install command, exit 2, no traceback."""
    code = ("import sys; sys.modules['torch'] = None\n"       # import torch then raises ModuleNotFoundError
            "from memplan.experiments.cli import main\n"
            f"sys.exit(main({[a.replace('OUT', str(tmp_path)) for a in argv]!r}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    err = r.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert "'torch'" in err and "pip install -e '.[torch]'" in err and "torch==2.13.0" in err


def test_a_schedule_over_its_limit_is_not_a_success(capsys):
    """Checkmate's LP rounding on paper 004's toy at 90 MiB replays at 107 MiB: reported as replayed,
    with status limit_exceeded (not feasible) and success False, so a script that keeps successes
    never plots it; the CLI exits 1."""
    from memplan.models.remat import simulate_remat

    chain = load_instance("paper004_table2").chain
    sol = memplan.solve(chain, "remat", "checkmate-lp", memory="90MiB", threads=1, time_limit=30)
    assert simulate_remat(chain, sol.schedule).peak_memory == sol.peak_memory > 90 * 2**20
    assert str(sol.status) == "limit_exceeded" and not sol.success and sol.details["limit_exceeded"]
    assert main(["solve", "paper004_table2", "--method", "checkmate-lp", "--memory", "90MiB", "--quiet"]) == 1
    assert "LIMIT EXCEEDED" in capsys.readouterr().out


def test_chains_compare_by_value_and_instance_errors_are_input_errors():
    """Two chains with the same arrays are equal and one that differs in a single value is not (the
    generated __eq__ raised 'truth value of an array is ambiguous'); an unknown instance is an
    InputError, as solve's docstring says bad input is."""
    import dataclasses

    a, b = memplan.random_chain(4, seed=2), memplan.random_chain(4, seed=2)
    assert a == b and not (a != b)
    wa = a.wa.copy()
    wa[2] += 1
    assert a != dataclasses.replace(a, wa=wa) and a != dataclasses.replace(a, u_turn=1e-3)
    assert a != "a chain"
    with pytest.raises(TypeError):
        hash(a)
    with pytest.raises(InputError, match="nosuch: no such instance file"):
        memplan.solve("nosuch", "remat", memory="90MiB")
    # a Platform takes quantities with units, as the rest of the API does
    p = memplan.Platform(memory="100MiB", bandwidth="1GB/s")
    assert (p.memory, p.bandwidth) == (100 * 2**20, 1e9)
    with pytest.raises(ValueError, match=r"Platform.memory = '100Mb': .*bits"):
        memplan.Platform(memory="100Mb")


def test_a_solution_prints_on_one_line():
    """repr/str of a Solution: one line with the problem, method, status, objective and memory, the
    schedule summarized (a remat-offload repr on ResNet-50 was 23,077 characters of arrays)."""
    sol = memplan.solve("paper004_table2", "remat", "rotor", memory="90MiB")
    text = repr(sol)
    assert text == str(sol) and "\n" not in text and len(text) < 200
    assert text.startswith("Solution(remat/rotor, status=optimal, objective=47.4 ms, peak_memory=86.8 MiB")
    assert f"<RematSchedule, {len(sol.schedule.ops)} operations>" in text


def test_compile_under_budget_bad_input_is_an_input_error():
    """A budget in bits, a negative one, or a bare tensor for example_inputs: memplan.InputError naming
    the argument (had been a UnitError, and a TypeError from deep inside torch)."""
    torch = pytest.importorskip("torch")
    m, x = torch.nn.Sequential(torch.nn.Linear(4, 4)), torch.randn(2, 4)
    for args, needle in ((((x,), "1Mb"), "reads as bits"), (((x,), -5), "negative"),
                         ((x, "1MiB"), "must be a tuple or list")):
        with pytest.raises(InputError, match=needle):
            memplan.compile_under_budget(m, *args)


# ----------------------------------------------------------------------------- session 36: a CLI fuzz
@pytest.mark.parametrize("name,kw,needle", [
    ("gpt2", {"n_layer": -1}, "n_layer=-1"),          # exited 0 with a GPT-2 of no block
    ("gpt2", {"n_layer": 0}, "n_layer=0"),
    ("gpt2", {"n_head": 0}, "n_head=0"),              # ZeroDivisionError
    ("gpt2", {"n_embd": 0}, "n_embd=0"),
    ("gpt2", {"vocab": 0}, "vocab=0"),
    ("gpt2", {"n_layer": "abc"}, "n_layer='abc'"),    # TypeError
    ("resnet18", {"num_classes": -5}, "num_classes=-5"),
])
def test_zoo_settings_out_of_range_are_refused(name, kw, needle):
    from memplan.models.networks import get_model

    with pytest.raises(ValueError, match="model") as e:
        get_model(name, **kw)
    assert needle in str(e.value) and "given:" in str(e.value)


def test_a_zoo_setting_out_of_range_is_one_line_from_the_command_line(tmp_path, capsys):
    rc, _, err = _run(["profile", "--model", "gpt2", "--batch", "1", "--input", "16", "--set", "n_layer=-1",
                       "-o", str(tmp_path / "g.json")], capsys)
    assert rc == 2 and "n_layer=-1" in _one_line(err) and not (tmp_path / "g.json").exists()


def test_an_unknown_method_is_named_before_a_missing_memory(tmp_path, capsys):
    """On an instance with no platform memory and no --memory, the missing memory was named first; the
    corrected command then failed on the method."""
    inst = tmp_path / "r.json"
    memplan.save_instance(memplan.random_chain(4, 0), inst)
    rc, _, err = _run(["solve", str(inst), "--problem", "remat", "--method", "nosuch"], capsys)
    line = _one_line(err)
    assert rc == 2 and "unknown method 'nosuch'" in line, line


@pytest.mark.parametrize("cmd", ["profile", "budget"])
def test_a_transformer_input_with_no_target_token_is_refused(cmd, tmp_path, capsys):
    """The encoder-decoder reads its first src_len ids as the source: an input of 16 tokens (src_len 64)
    left an empty target, a NaN loss, and memplan budget chose a plan for it (exit 0)."""
    small = ["--set", "n_enc=1", "--set", "n_dec=1", "--set", "d_model=32", "--set", "n_head=2", "--set", "d_ff=64",
             "--set", "vocab=100"]
    argv = [cmd, "--model", "transformer", "--batch", "2", "--input", "16", *small]
    argv += ["-o", str(tmp_path / "t.json")] if cmd == "profile" else ["--memory", "1MiB", "--fractions", "1",
                                                                    "--no-compiled-stages", "--repeats", "1"]
    rc, _, err = _run(argv, capsys)
    line = _one_line(err)
    assert rc == 2 and "src_len = 64" in line and "--input" in line, line


@pytest.mark.parametrize("budget", ["-1", "nan", "inf"])
def test_a_timing_budget_that_is_not_seconds_is_refused(budget, tmp_path, capsys):
    """memplan profile --timing-budget: -1 had profiled as 0 (exit 0); nan and inf are no budget either."""
    rc, _, err = _run(["profile", "--model", "gpt2", "--batch", "1", "--input", "16", "--timing-budget", budget,
                       "-o", str(tmp_path / "g.json")], capsys)
    assert rc == 2 and "--timing-budget" in _one_line(err) and not (tmp_path / "g.json").exists()


@pytest.mark.parametrize("bw", ["1e-310", "5e-324", "1e-120"])
def test_a_bandwidth_slower_than_any_link_is_refused(bw, capsys):
    """A subnormal bandwidth passed the positive check, then transfer times overflowed (numpy warnings
    and internal errors, or exit 1); below 1e-100 B/s it is refused, naming it."""
    with pytest.raises(InputError, match="bandwidth"):
        memplan.offload.solve(load_instance(TOY)[0], memory="80MiB", bandwidth=float(bw))
    rc, _, err = _run(["solve", TOY, "--problem", "offload", "--memory", "80MiB", "--bandwidth", bw], capsys)
    assert rc == 2 and "bandwidth" in _one_line(err)


def test_remat_offload_without_a_bandwidth_is_refused_on_the_command_line(capsys, no_solve):
    """The instance has no platform bandwidth: a forgotten --bandwidth solved re-materialization alone
    and exited 0; --bandwidth 0 still asks for that explicitly."""
    rc, _, err = _run(["solve", TOY, "--problem", "remat-offload", "--memory", "85MiB"], capsys)
    line = _one_line(err)
    assert rc == 2 and "--bandwidth" in line and "--bandwidth 0" in line


def test_run_refuses_a_solution_and_a_sequence_together(tmp_path, capsys):
    sol = tmp_path / "s.json"
    sol.write_text("{}")
    rc, _, err = _run(["run", str(ROOT / "instances" / "resnet18-b8-224-cpu.json"), "--solution", str(sol),
                       "--sequence", "store-all"], capsys)
    assert rc == 2 and "--sequence" in _one_line(err) and "give one" in _one_line(err)


@pytest.mark.parametrize("argv,needles", [
    (["--memory", "300MiB", "--bandwidth", "25GB/s"], ["--bandwidth", "--offload"]),   # was ignored
    (["--memory", "-3GiB"], ["--memory", "-3GiB"]),
    (["--memory", "1.5XB"], ["--memory", "1.5XB"]),
    (["--memory", "300MiB", "--cuda-peak", "allocated"], ["--cuda-peak", "cpu"]),            # was ignored
    (["--memory", "300MiB", "--no-chain", "--stage-fractions", "1,0.5"], ["--stage-fractions", "--no-chain"]),
])
def test_budget_options_are_named(argv, needles, capsys):
    rc, _, err = _run(["budget", "--model", "resnet18", "--batch", "1", "--input", "3x32x32", *argv], capsys)
    line = _one_line(err)
    assert rc == 2 and all(n in line for n in needles), line


@pytest.mark.parametrize("cmd", [["profile", "--model", "resnet18", "--batch", "1", "--input", "3x32x32"],
                                 ["import-pipedream", str(PD / "resnet18.graph.txt")]])
def test_an_empty_output_file_name_is_named(cmd, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, _, err = _run([*cmd, "-o", ""], capsys)
    assert rc == 2 and "-o/--output" in _one_line(err) and "empty" in _one_line(err)


def test_a_pipedream_node_given_twice_or_without_a_number_is_refused(tmp_path):
    text = (PD / "resnet18.graph.txt").read_text().splitlines(keepends=True)
    node = next(l for l in text if l.lstrip().startswith("node"))
    twice = tmp_path / "twice.graph.txt"
    twice.write_text(node + "".join(text))                   # the first node line again, first
    with pytest.raises(PipeDreamFormatError, match="second line"):
        import_graph(twice)
    import re

    empty = tmp_path / "empty.graph.txt"                      # backward_compute_time=[] was read as 0
    empty.write_text("".join(text).replace(node, re.sub(r"backward_compute_time=[^,]*", "backward_compute_time=[]",
                                                        node), 1))
    with pytest.raises(PipeDreamFormatError, match="backward_compute_time=\\[\\] holds no number"):
        import_graph(empty)


def test_a_batch_that_puts_the_profile_out_of_range_names_the_batch():
    with pytest.raises(InputError, match="batch=100000000000000000000"):
        import_graph(PD / "resnet18.graph.txt", batch=10**20)


def test_a_tiny_memory_limit_gives_no_numpy_warning(capsys):
    """1e-300 bytes: two "overflow encountered in divide" lines came before the answer, which read
    "fits in 0.0 B"."""
    rc, out, err = _run(["solve", TOY, "--problem", "remat", "--memory", "1e-300"], capsys)
    line = _one_line(err)
    assert rc == 2 and "overflow" not in err and "1e-300 B" in line and "82.1 MiB" in line


def test_save_instance_to_a_folder_names_it(tmp_path):
    chain = load_instance(TOY)[0]
    for overwrite in (False, True):
        with pytest.raises(IsADirectoryError, match="is a folder"):
            memplan.save_instance(chain, tmp_path, overwrite=overwrite)



def test_save_instance_names_a_platform_or_provenance_it_cannot_write(tmp_path):
    """A platform that is not a Platform failed deep inside ('str' object has no attribute 'memory'); a
    numpy number in the provenance failed in json ('Object of type float32 is not JSON serializable')
    and is now written as the number, anything else JSON cannot hold names the provenance (no file)."""
    import numpy as np

    chain = memplan.random_chain(3, seed=0)
    with pytest.raises(TypeError, match=r"^save_instance: platform must be a Platform .* or None, not str '16GiB'$"):
        memplan.save_instance(chain, tmp_path / "a.json", platform="16GiB")
    assert not (tmp_path / "a.json").exists()
    prov = memplan.Chain.from_stages(uf=[1, 2], ub=[3, 4], wa=[5, 6, 7], provenance={"lr": np.float32(0.5),
                                                                                     "sizes": np.arange(3)})
    back = memplan.load_instance(memplan.save_instance(prov, tmp_path / "b.json")).chain
    assert back.provenance["lr"] == 0.5 and back.provenance["sizes"] == [0, 1, 2]
    assert back.wa.tolist() == [5, 6, 7, 0] and back.store_all_time() == 10
    odd = memplan.Chain.from_stages(uf=[1, 2], ub=[3, 4], wa=[5, 6, 7], provenance={"tags": {"a"}})
    with pytest.raises(TypeError, match=r"^save_instance: Chain.provenance holds a set \(\{'a'\}\), which an "
                                        r"instance file cannot hold"):
        memplan.save_instance(odd, tmp_path / "c.json")
    assert not (tmp_path / "c.json").exists()

def test_a_profile_whose_only_source_computes_is_refused(tmp_path):
    """ResNet-18's profile without its Input node: the first convolution became a^0, its backward time
    and parameters dropped silently."""
    lines = (PD / "resnet18.graph.txt").read_text().splitlines(keepends=True)
    inp = next(l.split(" -- ")[0].strip() for l in lines if " -- Input -- " in l)
    kept = [l for l in lines if not l.lstrip().startswith(inp + " ") and not l.lstrip().startswith(inp + "\t")
            and not l.strip().startswith(f"{inp} --")]
    f = tmp_path / "noinput.graph.txt"
    f.write_text("".join(kept))
    with pytest.raises(PipeDreamFormatError, match="only source but not an Input node"):
        import_graph(f)


@pytest.mark.parametrize("given", [None, "INFO"])
def test_the_command_line_quiets_c10_log_lines_unless_asked(given):
    """c10's log lines (the profiler memory method's "Memory block of unknown size ...") came before
    'memplan budget''s one-line error: the command line sets TORCH_CPP_LOG_LEVEL=ERROR before torch is
    imported, keeping a value the user set."""
    code = ("import os, sys\n"
            "from memplan.experiments.cli import main\n"
            f"main(['show', {TOY!r}])\n"
            "import torch\n"
            "print('LEVEL', os.environ.get('TORCH_CPP_LOG_LEVEL'))\n")
    env = {k: v for k, v in os.environ.items() if k != "TORCH_CPP_LOG_LEVEL"}
    if given:
        env["TORCH_CPP_LOG_LEVEL"] = given
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert f"LEVEL {given or 'ERROR'}" in r.stdout


def test_a_limit_just_below_the_minimum_is_told_apart_from_it():
    """A limit a few bytes below the minimum reads as the same MiB (a new user typed back the README's
    '9.22MiB' and read 'no valid sequence fits in 9.2 MiB: the minimum feasible memory is 9.2 MiB'):
    the message gives the limit's bytes beside the minimum's, which a user can copy back."""
    toy = memplan.load_instance("paper004_table2").chain
    need = memplan.remat.solve(toy, memory=1, method="rotor").details["min_memory"]
    limit = need - 1000
    sol = memplan.remat.solve(toy, memory=limit, method="rotor")
    assert sol.status == memplan.Status.INFEASIBLE
    from memplan.models.units import fmt_bytes, fmt_memory

    assert fmt_memory(limit) == fmt_memory(need)          # the case: the same text in MiB
    assert f"fits in {fmt_memory(limit)} ({fmt_bytes(limit)} B)" in sol.message
    assert f"is {fmt_memory(need)} ({fmt_bytes(need)} B)" in sol.message
    assert memplan.remat.solve(toy, memory=need, method="rotor").schedule is not None


def test_the_exhaustive_joint_method_names_only_what_the_caller_gave():
    """remat-offload's exhaustive method chooses its bounding DP's discretization: where exact mode's
    tables were too large it raised 'exact=True means N = 278 slots ...' (exact not given), and on a long
    chain 'slots=50: ... give slots <= 21' (slots not given). Now it falls back to slots where exact
    mode does not fit, and a chain too long for it is refused in its own words."""
    sol = memplan.remat_offload.solve(memplan.random_chain(60, 1), memory=278, bandwidth=1, method="exhaustive",
                                      time_limit=1)
    assert "N = 50 memory slots" in sol.details["slots_note"]
    with pytest.raises(memplan.InputError) as e:
        memplan.remat_offload.solve(memplan.random_chain(1000, 1), memory=5000, bandwidth=1, method="exhaustive",
                                    time_limit=1)
    msg = str(e.value)
    assert "method='exhaustive' is meant for tiny chains" in msg and "use method='dp'" in msg
    assert "exact=True" not in msg and not msg.startswith("remat-offload: slots=")


def test_an_unknown_model_option_lists_the_ones_that_work():
    """--set foo=3 said only the constructor's "unexpected keyword argument 'foo'"."""
    from memplan.models.networks import get_model

    with pytest.raises(ValueError, match=r"model gpt2: no option 'n_layr' \(did you mean 'n_layer'\?\); it takes "
                                         r"vocab, n_ctx, n_layer, n_embd, n_head, dropout, tie_weights"):
        get_model("gpt2", n_layr=2)
    with pytest.raises(ValueError, match=r"model resnet18: no option 'foo'; it takes .*num_classes"):
        get_model("resnet18", foo=3)
