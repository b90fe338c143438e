"""A file the command line cannot write, found only when it writes (a full disk: here a name linked to
/dev/full, whose writes fail with ENOSPC; the checks before the work accept it, as they would a file on
a disk that fills up later): one line ``memplan: error: cannot write PATH: REASON``, exit status 2.
The error's own text had been ``memplan: error: No space left on device``, no file named."""
import os

import pytest

from conftest import ROOT
from memplan.experiments.cli import main

TOY = str(ROOT / "instances" / "paper004_table2.json")
pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")


def _full(tmp_path, name: str):
    """``tmp_path/name``, a link to /dev/full."""
    path = tmp_path / name
    path.symlink_to("/dev/full")
    return path


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.mark.parametrize("argv, name", [
    (["solve", TOY, "--memory", "90MiB", "-q", "--json"], "sol.json"),
    (["solve", TOY, "--problem", "offload", "--memory", "80MiB", "--bandwidth", "1GB/s", "--method", "dynprog", "-q",
      "--gantt"], "g.png"),
    (["import-pipedream", str(ROOT / "instances" / "pipedream" / "resnet18.graph.txt"), "--force", "-o"], "pd.json"),
])
def test_a_write_that_fails_names_the_file(argv, name, tmp_path, capsys):
    path = _full(tmp_path, name)
    assert main([*argv, str(path)]) == 2
    assert _one_line(capsys) == f"memplan: error: cannot write {path}: No space left on device"


def test_a_sweep_table_that_cannot_be_written_is_named(tmp_path, capsys):
    out = tmp_path / "sweep"
    out.mkdir()
    path = _full(out, "results.csv")
    assert main(["sweep", "remat", "--instance", TOY, "--points", "2", "--methods", "rotor", "--workers", "1",
                 "-o", str(out), "--no-plot", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"memplan: error: cannot write {path}: No space left on device"
    assert not any("Traceback" in line for line in err)
