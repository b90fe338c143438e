"""Bad input to the scripts researchers run directly (``python -m memplan.experiments.runtime_check``,
``gpu_profile``, ``pipedream_experiment``, ``python benchmarks/bench_budget.py``): each case a probe found
ending in a traceback, an argparse usage block, a hang of work before the error, or a silently changed
answer (a value read as its default, every solve turned into an error row) is one line on stderr,
``NAME: error: ...``, naming the option, with exit status 2, before any network is profiled or any
chain solved. ``main(argv)`` is called in-process (an error of the command line is returned as 2 by
``cli_checks.run_script``, not raised); one case per script runs it as researchers do, in a
subprocess."""
import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from memplan.experiments import cli_checks, gpu_profile, pipedream_experiment, runtime_check  # noqa: E402

from conftest import write_branches_graph  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CUDA = torch.cuda.is_available()
DEV_FULL = Path("/dev/full")
needs_dev_full = pytest.mark.skipif(not DEV_FULL.exists(), reason="no /dev/full here")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _bench_budget():
    spec = importlib.util.spec_from_file_location("bench_budget", ROOT / "benchmarks" / "bench_budget.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _refused(main, argv, start, capsys) -> str:
    """``main(argv)`` returns 2 with exactly one line on stderr, starting with ``start``."""
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and err.endswith("\n"), err
    assert err.startswith(start), err
    return err


@pytest.fixture
def a_file(tmp_path):
    """A regular file: no folder can be made, nor a file written, under it."""
    f = tmp_path / "plain"
    f.write_text("x")
    return f


# ------------------------------------------------------------------------------------- runtime_check
@pytest.mark.parametrize("argv, start", [
    (["--preset", "bogus"], "runtime_check: error: argument --preset: invalid choice: 'bogus'"),   # usage block
    (["--repeats", "0"], "runtime_check: error: argument --repeats: '0'"),             # silently 8 rounds
    (["--max-rounds", "0"], "runtime_check: error: argument --max-rounds: '0'"),       # silently the default
    (["--threads", "-1"], "runtime_check: error: argument --threads: '-1'"),           # RuntimeError traceback
    (["--time-limit", "-1"], "runtime_check: error: argument --time-limit: '-1'"),     # every plan 'not run', exit 0
    (["--time-limit", "nan"], "runtime_check: error: argument --time-limit: 'nan'"),
    (["--profile-repeats", "-1"], "runtime_check: error: argument --profile-repeats: '-1'"),   # profiled anyway
    (["--segments", "-1"], "runtime_check: error: argument --segments: '-1'"),         # no comparison, silently
    (["--budget", "0"], "runtime_check: error: argument --budget: '0'"),               # every network skipped
    (["--segments", "3"], "runtime_check: error: --segments: numbers of segments of the throughput comparison"),
    (["--segment-counts", "2,4"], "runtime_check: error: --segment-counts: numbers of segments of the throughput"),
    (["--models", ","], "runtime_check: error: --models ',': no network named"),       # nothing run, exit 0
    (["--models", "vgg16"], "runtime_check: error: --models: 'vgg16' is not in preset 'quick'"),
    (["--fractions", "0.5,2"], "runtime_check: error: --fractions '0.5,2': expected numbers between 0 and 1"),
    # the same plans planned and executed twice
    (["--fractions", "0.5,0.5"], "runtime_check: error: --fractions '0.5,0.5': expected distinct numbers between 0 "
                                 "and 1, and 0.5 is given more than once; give each fraction once"),
    (["--fractions", "0.25,0.5,0.50"], "runtime_check: error: --fractions '0.25,0.5,0.50': expected distinct "
                                       "numbers between 0 and 1, and 0.5 is given more than once"),
])
def test_runtime_check_refuses_in_one_line(argv, start, capsys):
    _refused(runtime_check.main, ["--quick"] + argv, start, capsys)


def test_runtime_check_checks_its_output_files_before_profiling(tmp_path, a_file, capsys):
    """A CSV under a regular file had ended in a traceback after the first network's profile and
    runs; two outputs on one path had overwritten each other."""
    _refused(runtime_check.main, ["--quick", "--out", str(a_file / "rt.csv")],
             f"runtime_check: error: --out {a_file / 'rt.csv'}: {a_file} is a file, not a folder", capsys)
    out = tmp_path / "rt.csv"
    _refused(runtime_check.main, ["--quick", "--out", str(out), "--throughput", str(out)],
             f"runtime_check: error: --out and --throughput: both {out}; give each its own file", capsys)
    _refused(runtime_check.main, ["--quick", "--out", str(out), "--throughput", str(tmp_path / "t.csv"),
                                  "--segments", "3", "--segment-counts", "2,4"],
             "runtime_check: error: --segments and --segment-counts: give one of the two", capsys)
    assert not out.exists()


@needs_dev_full
def test_runtime_check_write_failure_is_one_line():
    """The CSVs written after each network (gpu_profile's summary too): a full disk was a traceback."""
    with pytest.raises(cli_checks.CliError, match=r"^cannot write /dev/full: No space left on device$"):
        runtime_check.write_csv([{"network": "x"}], runtime_check.COLUMNS, DEV_FULL)


@pytest.mark.skipif(CUDA, reason="checks the refusal on a machine without CUDA")
def test_runtime_check_without_cuda(capsys):
    _refused(runtime_check.main, ["--device", "cuda"],
             "runtime_check: error: --device cuda: no CUDA device is available to this torch", capsys)


# --------------------------------------------------------------------------------------- gpu_profile
@pytest.mark.skipif(CUDA, reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("argv", [[], ["--out", "results/x"]])
def test_gpu_profile_says_it_needs_cuda(argv, capsys):
    """Its default device is cuda: with no option at all it had asked for --out first."""
    _refused(gpu_profile.main, argv, "gpu_profile: error: --device cuda: no CUDA device is available to this "
             "torch", capsys)


@pytest.mark.parametrize("argv, start", [
    (["--threads", "-1"], "gpu_profile: error: argument --threads: '-1'"),             # RuntimeError traceback
    (["--budget", "-1"], "gpu_profile: error: argument --budget: '-1'"),               # every setting skipped
    (["--host-link-mib", "0"], "gpu_profile: error: argument --host-link-mib: '0'"),
    (["--repeats", "x"], "gpu_profile: error: argument --repeats: 'x' is not a whole number"),
    (["--models", ","], "gpu_profile: error: --models ',': no setting or network named"),   # 0 written, exit 0
    (["--no-host-link", "--host-link-mib", "64"], "gpu_profile: error: --host-link-mib 64 and --no-host-link"),
    (["--bogus"], "gpu_profile: error: unrecognized arguments: --bogus"),
])
def test_gpu_profile_refuses_in_one_line(argv, start, tmp_path, capsys):
    _refused(gpu_profile.main, ["--device", "cpu", "--quick", "--out", str(tmp_path / "inst")] + argv, start,
             capsys)
    assert not list((tmp_path).glob("inst/*.json"))


def test_gpu_profile_checks_its_outputs_first(tmp_path, a_file, capsys):
    """--out under a file had failed after the host link (a traceback), --summary after the first
    profile; --summary without --out was ignored."""
    _refused(gpu_profile.main, ["--device", "cpu", "--quick", "--out", str(a_file / "inst")],
             f"gpu_profile: error: --out {a_file / 'inst'}: {a_file} is a file", capsys)
    _refused(gpu_profile.main, ["--device", "cpu", "--quick", "--out", str(tmp_path / "inst"), "--summary",
                                str(a_file / "s.csv")], f"gpu_profile: error: --summary {a_file / 's.csv'}: ", capsys)
    _refused(gpu_profile.main, ["--device", "cpu", "--torchvision", str(tmp_path / "tv.csv"), "--summary",
                                str(tmp_path / "s.csv")],
             "gpu_profile: error: --summary: written by the profiles, which need --out FOLDER", capsys)
    assert not (tmp_path / "inst").exists() or not list((tmp_path / "inst").iterdir())


def test_device_problem_names_a_missing_cuda_index(monkeypatch):
    """cuda:N beyond the machine's devices (or not a number) is named before torch fails on it later."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert cli_checks.device_problem("cuda") is None and cli_checks.device_problem("cuda:1") is None
    assert cli_checks.device_problem("cuda:2") == ("--device cuda:2: this machine has 2 CUDA device(s), cuda:0 to "
                                                   "cuda:1; use one of them, or cuda")
    assert cli_checks.device_problem("cuda:x").startswith("--device cuda:x: this machine has 2 CUDA device(s)")
    assert cli_checks.device_problem("cuda:").startswith("--device cuda:: this machine has 2 CUDA device(s)")


# ------------------------------------------------------------------------------ pipedream_experiment
@pytest.fixture
def graph(tmp_path):
    """A PipeDream graph.txt of four layers on two branches (conftest.write_branches_graph)."""
    return write_branches_graph(tmp_path / "branches.graph.txt")


P = "pipedream_experiment: error: "


@pytest.mark.parametrize("argv, start", [
    # an unknown method, a bad link, a zero GPU count, a negative time limit: error rows at every point
    # after all the other solves, exit 1
    (["--remat-methods", "rotor,bogus"], P + "--remat-methods: unknown method 'bogus'; choose from rotor,"),
    (["--pipeline-methods", "bogus"], P + "--pipeline-methods: unknown method 'bogus'; choose from ilp,"),
    (["--gpus", "0"], P + "argument --gpus: '0': give a whole number >= 1"),
    (["--bandwidth", "0"], P + "--bandwidth 0: links that carry nothing"),
    (["--time-limit", "-1"], P + "argument --time-limit: '-1'"),
    # tracebacks
    (["--bandwidth", "abc"], P + "--bandwidth abc: cannot read bandwidth 'abc'"),
    (["--batch", "0"], P + "argument --batch: '0': give a whole number >= 1"),
    # argparse's usage block ("expected one argument")
    (["--bandwidth", "-1GB/s"], P + "--bandwidth -1GB/s: bandwidth '-1GB/s' is negative"),
    # memory limits outside the range, nan: error or meaningless rows
    (["--remat-fractions", "2"], P + "argument --remat-fractions: '2': give numbers between 0 and 1"),
    (["--pipeline-fractions", "nan"], P + "argument --pipeline-fractions: 'nan': give numbers between 0 and 1"),
    (["--remat-fractions", "x"], P + "argument --remat-fractions: 'x': give numbers between 0 and 1"),
    # options nothing uses
    (["--remat-methods", "", "--remat-fractions", "0.5"], P + "--remat-fractions: the memory limits of "
                                                              "--remat-methods, which is empty"),
    (["--remat-methods", "", "--pipeline-methods", ""], P + "--remat-methods and --pipeline-methods: both empty"),
    # options of the pipeline solves with no pipeline method: accepted, used by nothing (the default's
    # value given explicitly too)
    (["--pipeline-methods", "", "--gpus", "2"], P + "--gpus 2: an option of the pipeline solves, and "
                                                    "--pipeline-methods is empty; give pipeline methods, or leave "
                                                    "--gpus out"),
    (["--pipeline-methods", "", "--gpus", "4"], P + "--gpus 4: an option of the pipeline solves"),
    (["--pipeline-methods", "", "--bandwidth", "inf"], P + "--bandwidth inf: an option of the pipeline solves, and "
                                                           "--pipeline-methods is empty"),
    (["--pipeline-methods", ",", "--time-limit", "30"], P + "--time-limit 30: an option of the pipeline solves, "
                                                           "and --pipeline-methods is empty"),
])
def test_pipedream_experiment_refuses_in_one_line(argv, start, graph, tmp_path, capsys):
    out = tmp_path / "out"
    _refused(pipedream_experiment.main, ["--profiles", str(graph), "--out", str(out)] + argv, start, capsys)
    assert not out.exists()


def test_pipedream_experiment_remat_only_runs_without_pipeline_options(graph, tmp_path, capsys):
    """--pipeline-methods '' without --gpus, --bandwidth, --time-limit still runs the remat solves (their
    defaults are now None, filled in only for the pipeline solves)."""
    out = tmp_path / "out"
    assert pipedream_experiment.main(["--profiles", str(graph), "--remat-methods", "rotor", "--remat-fractions",
                                      "1", "--pipeline-methods", "", "--out", str(out)]) == 0
    assert (out / "pipedream_remat.csv").exists() and not (out / "pipedream_pipeline.csv").exists()


def test_pipedream_experiment_pipeline_defaults(graph, tmp_path, capsys):
    """Without --gpus, --bandwidth, --time-limit the pipeline rows use 4 GPUs and 12GB/s, as before."""
    import pandas as pd

    out = tmp_path / "out"
    assert pipedream_experiment.main(["--profiles", str(graph), "--batch", "128", "--remat-methods", "",
                                      "--pipeline-methods", "pipedream", "--pipeline-fractions", "1",
                                      "--out", str(out)]) == 0
    row = pd.read_csv(out / "pipedream_pipeline.csv").iloc[0]
    assert row["gpus"] == 4 and row["bandwidth"] == pytest.approx(12e9)


def test_pipedream_experiment_reads_every_profile_first(graph, tmp_path, capsys):
    """A missing or unreadable profile had been a traceback, after the solves of the profiles before it."""
    out = tmp_path / "out"
    missing = tmp_path / "missing.graph.txt"
    _refused(pipedream_experiment.main, ["--profiles", str(graph), str(missing), "--out", str(out)],
             f"{P}{missing}: no such PipeDream graph file", capsys)
    _refused(pipedream_experiment.main, ["--profiles", str(graph), str(ROOT / "README.md"), "--out", str(out)],
             f"{P}{ROOT / 'README.md'}:1: not a node or edge line", capsys)
    assert not out.exists()                # nothing solved, nothing written


def test_pipedream_experiment_output_errors(graph, tmp_path, a_file, capsys):
    _refused(pipedream_experiment.main, ["--profiles", str(graph), "--out", str(a_file / "out")],
             f"{P}--out {a_file / 'out'}: {a_file} is a file, so no folder can be made under it", capsys)
    out = tmp_path / "out"
    (out / "pipedream_remat.csv").mkdir(parents=True)       # the write itself fails (IsADirectoryError)
    _refused(pipedream_experiment.main, ["--profiles", str(graph), "--out", str(out), "--remat-methods", "rotor",
                                         "--remat-fractions", "1", "--pipeline-methods", ""],
             f"{P}cannot write {out / 'pipedream_remat.csv'}: Is a directory", capsys)


def test_pipedream_experiment_free_links(graph, tmp_path, capsys):
    """--bandwidth inf (free communications, as memplan.pipeline and 'memplan solve' read it) had been a
    UnitError traceback; it runs, and PipeDream's period is the one stage's compute, 6 ms forward and
    12 ms backward at batch 128 by hand (the single-tensor chain of the two branches is one stage)."""
    import pandas as pd

    out = tmp_path / "out"
    assert pipedream_experiment.main(["--profiles", str(graph), "--batch", "128", "--remat-methods", "",
                                      "--pipeline-methods", "pipedream", "--pipeline-fractions", "1", "--gpus", "2",
                                      "--bandwidth", "inf", "--out", str(out)]) == 0
    row = pd.read_csv(out / "pipedream_pipeline.csv").iloc[0]
    assert row["method"] == "pipedream" and math.isinf(row["bandwidth"])
    assert row["L"] == 1 and row["period"] == pytest.approx(18e-3)


# -------------------------------------------------------------------------------------- bench_budget
B = "bench_budget: error: "


@pytest.mark.parametrize("argv, start", [
    # InputErrors of BudgetSearch: a traceback after eager's and float64's steps
    (["--cuda-peak", "allocated"], B + "--cuda-peak allocated: reads the CUDA caching allocator, and --device is "
                                       "cpu"),
    (["--stage-solver", "pytorch"], B + "--stage-solver pytorch: the solver inside stages compiled at a stage "
                                        "fraction below 1"),
    (["--search-time-limit", "-5"], B + "argument --search-time-limit: '-5'"),
    # argparse's usage block
    (["--model", "gpt2"], B + "unrecognized arguments: --model gpt2"),
    (["--memory", "1GB"], B + "unrecognized arguments: --memory 1GB"),
    (["--backend", "xla"], B + "argument --backend: invalid choice: 'xla'"),
    # read as the default (0), or no rows at all
    (["--min-rounds", "0"], B + "argument --min-rounds: '0'"),
    (["--max-rounds", "-1"], B + "argument --max-rounds: '-1'"),
    (["--timing-budget", "-1"], B + "argument --timing-budget: '-1'"),
    (["--min-rounds", "5", "--max-rounds", "3"], B + "--min-rounds 5 is above --max-rounds 3"),
    (["--networks", ","], B + "--networks ',': no network named"),
    # options that conflict
    (["--sizes", "gpu"], B + "--sizes gpu and --quick: --quick runs its own tiny sizes"),
    # the refusals the script had, in the shared form
    (["--fractions", "1,1"], B + "--fractions '1,1': give distinct numbers in (0, 1]"),
    (["--deadline", "0"], B + "--deadline 0: give a finite, positive number of seconds"),
    (["--save-offload", "/tmp/x"], B + "--save-offload needs --offload"),
])
def test_bench_budget_refuses_in_one_line(argv, start, capsys):
    _refused(_bench_budget().main, ["--quick"] + argv, start, capsys)


def test_bench_budget_files(tmp_path, a_file, capsys):
    """--out under a file had failed after the first network's run; --out x.txt was overwritten by its
    own summary; --summary of a missing file or of another file was a pandas traceback."""
    main = _bench_budget().main
    _refused(main, ["--quick", "--out", str(a_file / "b.csv")],
             f"{B}--out {a_file / 'b.csv'}: {a_file} is a file, not a folder", capsys)
    _refused(main, ["--quick", "--out", str(tmp_path / "b.txt")],
             f"{B}--out {tmp_path / 'b.txt'}: the summary is written beside the CSV as b.txt, the same file", capsys)
    _refused(main, ["--summary", str(tmp_path / "none.csv")],
             f"{B}--summary {tmp_path / 'none.csv'}: cannot read it as a CSV (No such file or directory)", capsys)
    _refused(main, ["--summary", str(ROOT / "README.md")],
             f"{B}--summary {ROOT / 'README.md'}: cannot read it as a CSV", capsys)
    other = tmp_path / "other.csv"
    other.write_text("network,method\ngpt2,eager\n")
    _refused(main, ["--summary", str(other)], f"{B}--summary {other}: not a CSV written by bench_budget --out (no "
             "column label, status, same_as, peak_memory)", capsys)
    _refused(main, ["--quick", "--networks", "gpt2", "--update", "--out", str(other)],
             f"{B}--update: --out {other}: not a CSV written by bench_budget --out", capsys)


def test_bench_budget_summary_of_a_written_csv_still_prints():
    """The valid use of --summary is unchanged (the shipped CPU results)."""
    csv = ROOT / "benchmarks" / "results" / "bench_budget_cpu.csv"
    if not csv.exists():
        pytest.skip("no shipped bench_budget results")
    assert _bench_budget().main(["--summary", str(csv)]) == 0


@needs_dev_full
def test_bench_budget_write_failure_is_one_line():
    with pytest.raises(cli_checks.CliError, match=r"^cannot write /dev/full: No space left on device$"):
        _bench_budget().write_csv([{"network": "x"}], DEV_FULL)


# ------------------------------------------------------------------------------- as researchers run them
@pytest.mark.parametrize("cmd, start", [
    ([sys.executable, "-m", "memplan.experiments.runtime_check", "--repeats", "0"],
     "runtime_check: error: argument --repeats: '0'"),
    ([sys.executable, "-m", "memplan.experiments.gpu_profile", "--device", "cpu", "--out", "x", "--threads", "0"],
     "gpu_profile: error: argument --threads: '0'"),
    ([sys.executable, "-m", "memplan.experiments.pipedream_experiment", "--gpus", "0"],
     "pipedream_experiment: error: argument --gpus: '0'"),
    ([sys.executable, str(ROOT / "benchmarks" / "bench_budget.py"), "--model", "gpt2"],
     "bench_budget: error: unrecognized arguments: --model gpt2"),
])
def test_scripts_run_directly(cmd, start, tmp_path):
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith(start), r.stderr


def test_budget_and_runtime_check_share_the_repeat_check():
    """memplan budget --fractions and runtime_check --fractions refuse repeats through one function
    (cli_checks.repeated); budget's message is the one it had before."""
    import argparse

    from memplan.experiments import cmd_budget

    with pytest.raises(argparse.ArgumentTypeError) as e:
        cmd_budget._fractions("1,0.5,1,0.5")
    assert str(e.value) == ("--fractions '1,0.5,1,0.5': expected distinct numbers in [0, 1], and 0.5, 1 is given "
                            "more than once; give each fraction once")
    assert cli_checks.repeated("--fractions", "0.1,0.2", [0.1, 0.2], "distinct numbers", "fraction") is None


def test_pipedream_experiment_defaults_to_the_shipped_profiles_in_a_clone_alone(tmp_path, monkeypatch):
    """Without ../shared/external/pipedream (a fresh clone) the profiles default to the ones shipped in
    instances/pipedream, so the README's command runs from a clone (it had stopped: 'no PipeDream
    profiles found'); where the shared folder has some, those."""
    shipped = sorted(p.name for p in (Path(pipedream_experiment.__file__).resolve().parents[1] / "instances"
                                      / "pipedream").glob("*.graph.txt"))
    assert {"resnet18.graph.txt", "resnet50.graph.txt", "gnmt.graph.txt"} <= set(shipped)
    monkeypatch.setattr(pipedream_experiment, "DEFAULT_DIR", tmp_path / "absent")
    where, files = pipedream_experiment.default_profiles()
    assert where == pipedream_experiment.SHIPPED_DIR and [f.name for f in files] == shipped
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "x.graph.txt").write_text("")
    monkeypatch.setattr(pipedream_experiment, "DEFAULT_DIR", shared)
    assert pipedream_experiment.default_profiles() == (shared, [shared / "x.graph.txt"])


@pytest.mark.parametrize("script, args", [
    ("bench_pipeline.py", ["--L", "0"]),
    ("bench_pipeline.py", ["--bandwidth", "12GB"]),
    ("bench_rotor.py", ["--quick", "--slots", "0"]),
    ("bench_remat_bound.py", ["--time-limit", "-1"]),
    ("check_contiguous_patterns.py", ["--memory", "abc"]),
    # refused by runtime_check, then it had summarized the previous run's tables and overwritten the
    # committed results/executor_parity_cpu.txt with that summary under the bad command line
    ("bench_executor_parity.py", ["--models", "bogus", "--out", "OUT"]),
])
def test_benchmark_scripts_refuse_bad_input_in_one_line(script, args, tmp_path):
    """A CLI fuzz found ~20 benchmark scripts ending bad input in a traceback (or argparse's usage
    block): they parse with OneLineParser and run under guarded, as memplan's own commands."""
    out = tmp_path / "parity"
    args = [str(out) if a == "OUT" else a for a in args]
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-500:]
    assert lines[0].split(": error: ")[0] in (script.removesuffix(".py"), "runtime_check")
    assert not list(tmp_path.iterdir())
    if script == "bench_executor_parity.py":          # no summary of an earlier run's tables
        assert r.stdout == ""
