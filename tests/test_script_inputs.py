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


# ------------------------------------------------------------------------------- as researchers run them
@pytest.mark.parametrize("cmd, start", [
    ([sys.executable, "-m", "memplan.experiments.runtime_check", "--repeats", "0"],
     "runtime_check: error: argument --repeats: '0'"),
    ([sys.executable, "-m", "memplan.experiments.gpu_profile", "--device", "cpu", "--out", "x", "--threads", "0"],
     "gpu_profile: error: argument --threads: '0'"),
])
def test_scripts_run_directly(cmd, start, tmp_path):
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith(start), r.stderr
