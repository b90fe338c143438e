"""The sweep engine (issue 19): grid -> tasks on Dask (or in-process) -> one tidy, resumable table -> figures.

Values are checked against a second method and the problem's definition (rotor is optimal among
persistent sequences, so never slower than ``sequential``; the remat MILP is exact for paper 004's
model, so never slower than rotor; every replayed peak is within its limit), and the same grid run
on 1 worker, 2 workers and an external scheduler gives the same rows, timing columns aside.
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from memplan.experiments.cli import main
from memplan.experiments.sweep_engine import VOLATILE, read_results, same_rows

from conftest import ROOT

pytest.importorskip("dask.distributed")
pytest.importorskip("pyarrow")

TOY = str(ROOT / "instances" / "paper004_table2.json")
ARGS = ["sweep", "remat", "--instance", TOY, "--methods", "rotor,sequential,remat-milp", "--points", "6",
        "--time-limit", "30", "-q"]


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory):
    out = tmp_path_factory.mktemp("w1")
    assert main(ARGS + ["--workers", "1", "-o", str(out)]) == 0
    return out, read_results(out)


def _check_values(df):
    assert len(df) == 6 * 3 and set(df.method) == {"rotor", "sequential", "remat-milp"}
    assert (df.status != "error").all()
    ok = df[df.objective.notna()]
    assert (ok.peak_memory <= ok.memory_limit * (1 + 1e-9)).all()
    piv = df.pivot_table(index="memory_limit", columns="method", values="objective")
    assert piv.rotor.notna().all()          # from the minimum memory on, rotor always has a schedule
    both = piv.dropna(subset=["sequential"])
    assert len(both) >= 3 and (both.rotor <= both.sequential * (1 + 1e-9)).all()
    assert (piv["remat-milp"] <= piv.rotor * (1 + 1e-6)).all()
    # the limits run from the minimum feasible memory to store-all's peak (memplan.remat.memory_range)
    import memplan
    lo, hi = memplan.remat.memory_range(memplan.load_instance(TOY).chain)
    assert piv.index.min() == pytest.approx(lo) and piv.index.max() == pytest.approx(hi)
    # versions and the grid's coordinates are columns
    assert df.solver.str.startswith("highspy").all() and (df.memplan_version == memplan.__version__).all()
    assert set(df.fraction.round(6)) == {round(k / 5, 6) for k in range(6)}


def test_two_workers_write_table_and_figure_and_agree_with_one(one_worker, tmp_path):
    out1, df1 = one_worker
    _check_values(df1)
    out2 = tmp_path / "w2"
    assert main(ARGS + ["--workers", "2", "-o", str(out2), "--csv"]) == 0
    df2 = read_results(out2)
    _check_values(df2)
    assert same_rows(df1, df2) == []
    assert len(set(df2.worker)) == 2        # both worker processes solved tasks
    assert (out2 / "remat_paper004-table2.png").stat().st_size > 10_000
    csv = pd.read_csv(out2 / "results.csv")
    assert len(csv) == len(df2) and set(csv.key) == set(df2.key)
    # the figure is redrawn from the table alone (Parquet folder or CSV)
    (out2 / "remat_paper004-table2.png").unlink()
    assert main(["plot", str(out2), "--figure", "remat"]) == 0
    assert (out2 / "remat_paper004-table2.png").stat().st_size > 10_000
    assert main(["plot", str(out2 / "results.csv"), "--figure", "remat", "-o", str(tmp_path / "fig")]) == 0
    assert (tmp_path / "fig" / "remat_paper004-table2.png").exists()


@pytest.mark.long
def test_external_scheduler_gives_the_same_rows(one_worker, tmp_path):
    out1, df1 = one_worker
    sched_file = tmp_path / "scheduler.json"
    procs = []
    try:
        # this interpreter's Dask (python -m dask), not whatever 'dask' is first on PATH: the test then
        # runs with the virtual environment's python when the environment is not activated, and the
        # worker imports this checkout's memplan
        procs.append(subprocess.Popen([sys.executable, "-m", "dask", "scheduler", "--no-dashboard", "--port", "0",
                                       "--scheduler-file", str(sched_file)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        t0 = time.time()
        while not sched_file.exists() and time.time() - t0 < 60:
            assert procs[0].poll() is None, "the Dask scheduler exited"
            time.sleep(0.2)
        address = json.loads(sched_file.read_text())["address"]
        procs.append(subprocess.Popen([sys.executable, "-m", "dask", "worker", address, "--nworkers", "1",
                                       "--nthreads", "1", "--no-dashboard"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        out = tmp_path / "ext"
        assert main(ARGS + ["--scheduler", address, "-o", str(out)]) == 0
        assert same_rows(df1, read_results(out)) == []
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def test_unreachable_scheduler_is_one_line(tmp_path, capsys):
    import dask

    t0 = time.perf_counter()
    with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):     # Dask's own setting is honoured
        assert main(ARGS + ["--scheduler", "tcp://127.0.0.1:1", "-o", str(tmp_path / "x")]) == 2
    assert time.perf_counter() - t0 < 15
    err = capsys.readouterr().err
    assert "--scheduler tcp://127.0.0.1:1" in err and "Traceback" not in err


def test_killed_sweep_resumes_with_only_the_missing_tasks(tmp_path):
    out = tmp_path / "resume"
    cmd = [sys.executable, "-m", "memplan.experiments.remat_sweep", "--instance", TOY, "--methods",
           "remat-milp,checkmate", "--points", "12", "--time-limit", "30", "--workers", "1", "-q", "--no-plot",
           "-o", str(out)]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    parts = out / "results"
    try:
        t0 = time.time()
        while time.time() - t0 < 120 and p.poll() is None and len(list(parts.glob("part-*.parquet"))) < 3:
            time.sleep(0.02)
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.wait(timeout=30)
    first = read_results(out)
    total = 12 * 2
    assert 3 <= len(first) < total, "the sweep finished before it could be killed"
    assert main(["sweep", "remat", "--instance", TOY, "--methods", "remat-milp,checkmate", "--points", "12",
                 "--time-limit", "30", "--workers", "1", "-q", "--no-plot", "-o", str(out)]) == 0
    df = read_results(out)
    assert len(df) == total and df.key.is_unique
    runs = df.groupby("run_id").size()
    assert len(runs) == 2 and sorted(runs) == sorted([len(first), total - len(first)])
    # the rows solved before the kill were kept as they were
    kept = df[df.key.isin(first.key)].set_index("key").sort_index()
    assert (kept.run_id == first.set_index("key").sort_index().run_id).all()
    log = (out / "sweep.log").read_text()
    assert f"{len(first)} already in the table, {total - len(first)} to solve" in log
    # a third run solves nothing
    assert main(["sweep", "remat", "--instance", TOY, "--methods", "remat-milp,checkmate", "--points", "12",
                 "--time-limit", "30", "--workers", "1", "-q", "--no-plot", "-o", str(out)]) == 0
    assert len(read_results(out).groupby("run_id")) == 2


def test_an_exception_in_a_task_is_an_error_row_and_the_sweep_goes_on(tmp_path, capsys):
    cfg = tmp_path / "exp.toml"
    cfg.write_text(f"""
workers = 2
csv = true
[[grid]]
problem = "remat"
instances = ["{TOY}"]
methods = ["rotor"]
memory = ["85MiB", "95MiB"]
[grid.options]
exact = [false, true]
[[grid]]
problem = "offload"
instance = "{TOY}"
methods = ["dynprog", "lb"]
memory = ["90MiB"]
bandwidth = ["1GB/s", "2GB/s"]
""")
    out = tmp_path / "cfg"
    assert main(["sweep", "--config", str(cfg), "-o", str(out), "-q", "--no-plot"]) == 1   # errors: status 1
    df = read_results(out)
    assert len(df) == 2 * 2 + 2 * 2
    err = df[df.status == "error"]
    # exact=True on a chain with fractional sizes: refused by each task's solve (it depends on the chain)
    assert len(err) == 2 and (err.options == '{"exact": true}').all()
    assert err.error.str.contains("InputError").all() and err.error.str.contains("exact=True").all()
    good = df[df.status != "error"]
    assert good.objective.notna().sum() == 4       # rotor at 2 limits, dynprog at 2 bandwidths
    # the lb row carries the bound of Proposition 3, below DYNPROG's makespan
    off = good[good.problem == "offload"].set_index(["bandwidth", "method"])
    for bw in (1e9, 2e9):
        assert off.loc[(bw, "lb"), "bound"] <= off.loc[(bw, "dynprog"), "objective"] * (1 + 1e-9)
    assert "exact=True" in capsys.readouterr().err
    assert (out / "results.csv").exists()


@pytest.mark.parametrize("argv, needle", [
    (["sweep", "remat", "--instance", TOY, "--methods", "rotor,nope", "--points", "2"], "--methods"),
    (["sweep", "remat", "--instance", TOY, "--option", "bogus=1", "--points", "2"], "options"),
    (["sweep", "remat", "--instance", TOY, "--memory", "90 parsecs"], "90 parsecs"),
    (["sweep"], "--config"),
    (["sweep", "offload", "--instance", TOY, "--bandwidth", "inf", "--points", "2"], "free links"),
])
def test_bad_input_is_one_line(argv, needle, tmp_path, capsys):
    assert main(argv + ["-o", str(tmp_path / "o")] if argv != ["sweep"] else argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_bad_config_names_the_key(tmp_path, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[[grid]]\nproblem = "remat"\ninstances = ["x"]\npoints = 3\nmethod = ["rotor"]\n')
    assert main(["sweep", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "bad.toml" in err and "'method'" in err


def test_pipeline_sweep_takes_free_links_beside_a_bandwidth(tmp_path):
    """``--bandwidth inf,10MB/s``: both swept, the table keeps inf (not a missing value), each row is
    the front end's answer at its own link, and the two differ (inf is not silently dropped)."""
    import memplan

    out = tmp_path / "pipe"
    assert main(["sweep", "pipeline", "--random", "8", "--seed", "3", "--methods", "pipedream", "--gpus", "2",
                 "--bandwidth", "inf,10MB/s", "--points", "2", "--workers", "1", "-o", str(out), "-q"]) == 0
    df = pd.read_csv(out / "results.csv")
    assert sorted(df.bandwidth.unique()) == [1e7, math.inf]
    chain = memplan.random_chain(8, seed=3, integer=False)      # what the sweep's random:8:3 is
    at = {}
    for r in df[df.objective.notna()].itertuples():     # the lowest limit may be below PipeDream's reach
        opts = {k: v for k, v in json.loads(r.options).items() if v is not None}
        own = memplan.pipeline.solve(chain, memory=r.memory_limit, bandwidth="inf" if math.isinf(r.bandwidth) else
                                     "10MB/s", gpus=2, method="pipedream", **opts)
        assert r.objective == pytest.approx(own.objective, rel=1e-9)
        at[(r.fraction, r.bandwidth)] = r.objective
    assert at[(1.0, math.inf)] < at[(1.0, 1e7)]
    assert (out / "pipeline_random-L8-seed3_P2.png").exists()


def test_a_swept_option_is_a_curve_of_its_own_in_the_figure_and_the_summary(tmp_path, capsys):
    """``--option slots=20,500``: rotor at 20 slots and at 500 slots are two curves (the coarse
    discretization cannot reach the lower limits), not one line zigzagging between them; threads
    never split a curve."""
    from memplan.experiments.figures import curve_labels

    out = tmp_path / "slots"
    assert main(["sweep", "remat", "--instance", TOY, "--memory", "85MiB,110MiB", "--option", "slots=20,500",
                 "--methods", "rotor", "--workers", "1", "-o", str(out), "-q"]) == 0
    df = pd.read_csv(out / "results.csv")
    labels = curve_labels(df)
    assert sorted(set(labels)) == ["rotor (slots=20)", "rotor (slots=500)"]
    for lab, slots in (("rotor (slots=20)", 20), ("rotor (slots=500)", 500)):
        assert all(json.loads(o)["slots"] == slots for o in df.options[labels == lab])
    summary = capsys.readouterr().out
    ok = df[df.objective.notna()]
    for lab in ("rotor (slots=20)", "rotor (slots=500)"):
        line = next(x for x in summary.splitlines() if x.startswith(lab))
        assert int(line.split()[2]) == int((ok.options.map(lambda o: json.loads(o)["slots"]) ==
                                             int(lab.split("=")[1][:-1])).sum())
    same = df.assign(options=['{"threads": %d}' % (i % 2 + 1) for i in range(len(df))])
    assert set(curve_labels(same)) == {"rotor"}


def test_volatile_columns_are_the_timings_only():
    assert set(VOLATILE) == {"solve_time", "wall_time", "times", "worker", "run_id", "finished_at"}


# ------------------------------------------------------------------ chains, shared inputs, worker death
# a random chain of 6 layers on 2 GPUs, free communications (bandwidth inf, asked for explicitly): between
# 0.75 and 1 of its memory range
# every ILP limit solves in about a second, and the ILP beats both baselines there
PIPE = dict(methods=["ilp", "pipedream", "gpipe"], gpus=[2], bandwidth=[math.inf], time_limit=30,
            options={"memory_model": "paper", "n_batches": 60, "threads": 1})


def _pipeline_tasks(fractions, methods=None):
    from memplan.experiments.sweep_engine import Grid, expand

    return expand([Grid("pipeline", ["random:6:1"], fractions=fractions, **{**PIPE, "methods": methods or PIPE["methods"]})])


def test_pipeline_ilp_rows_never_worse_with_more_memory_and_share_the_baseline_points(tmp_path):
    """The ILP tasks of a series run as independent tasks (no task waits for another), on 1 worker,
    on 2 workers and after a resume; the carried rows make their periods never increase with the
    limit, and they are never above a baseline's at the same limit (the baselines' points are the
    ILP's too); every row's pattern replays to its period within its limit."""
    import memplan
    from memplan.experiments.sweep_engine import run_sweep, run_task
    from memplan.models.pipeline import Pattern, simulate_pattern, task_data

    tasks, inputs = _pipeline_tasks([1.0, 0.75, 0.9])
    ilp = sorted((t for t in tasks if t["method"] == "ilp"), key=lambda t: t["memory_limit"])
    assert len(ilp) == 3 and all(t["weight"] == 30 for t in ilp)
    assert all(t["weight"] == 0 for t in tasks if t["method"] != "ilp")      # lookups in the shared points
    # one set of complete baseline points per series, the same object for every method
    keys = {t["inputs"]["points"] for t in tasks}
    assert len(keys) == 1 and {p.method for p in inputs[keys.pop()]} == {"pipedream", "gpipe"}

    seen = []

    def recording(task, instance, inp):
        seen.append(task["key"])
        return run_task(task, instance, inp)

    # resume: the first ILP limit is solved alone, the others by the second run only
    out1 = tmp_path / "w1"
    run_sweep([ilp[0]], inputs, out1, workers=1, progress=False)
    run_sweep(tasks, inputs, out1, workers=1, progress=False, task_fn=recording)
    assert sorted(seen) == sorted(t["key"] for t in tasks if t is not ilp[0])
    df1 = read_results(out1)
    out2 = tmp_path / "w2"
    run_sweep(tasks, inputs, out2, workers=2, progress=False)
    df2 = read_results(out2)
    assert same_rows(df1, df2) == []

    chain = memplan.random_chain(6, seed=1, integer=False)
    td = task_data(chain, None, "paper")
    piv = df1.pivot_table(index="memory_limit", columns="method", values="objective")
    assert len(piv) == 3 and piv.notna().all().all()
    assert (piv["ilp"].diff().dropna() <= 1e-9).all()                       # never worse with more memory
    assert (piv["ilp"] <= piv[["pipedream", "gpipe"]].min(axis=1) * (1 + 1e-9)).all()
    assert (piv["ilp"] < piv["pipedream"] * (1 - 1e-3)).any()                # and does better somewhere
    # the row's schedule replays to the row's values
    for r in df1[df1.method == "ilp"].itertuples():
        pat = Pattern.from_json(json.loads(r.schedule))
        sim = simulate_pattern(pat, td, gpus=2)
        assert sim.period == pytest.approx(r.objective) and sim.peak_memory <= r.memory_limit * (1 + 1e-9)
    assert df1[df1.method != "ilp"].schedule.isna().all()
    # the baseline rows are the best points within the limit, as a solve computing its own sweep says
    for r in df1[df1.method == "pipedream"].itertuples():
        own = memplan.pipeline.solve(chain, memory=r.memory_limit, bandwidth=math.inf, gpus=2, method="pipedream",
                                     n_batches=60, memory_model="paper")
        assert own.objective == pytest.approx(r.objective)


def test_carry_forward_gives_a_row_the_better_pattern_of_a_smaller_limit(tmp_path):
    """An ILP row that found nothing, and one that returned a pattern slower than one found at a smaller
    limit (here: PipeDream's best pattern, as a solve stopped early could return), take the best
    pattern of the smaller limits: it replays to the period the row reports, within the row's limit,
    the row names the limit it comes from and what its own solve found; a second pass changes nothing;
    the row of the smallest limit, with nothing below it, is left as solved."""
    import memplan
    from memplan.experiments.sweep_engine import carry_forward, run_sweep, run_task
    from memplan.models.pipeline import Pattern, simulate_pattern, task_data

    tasks, inputs = _pipeline_tasks([0.75, 0.9, 1.0], ["ilp"])
    ilp = sorted(tasks, key=lambda t: t["memory_limit"])
    chain = memplan.random_chain(6, seed=1, integer=False)
    slow = memplan.pipeline.solve(chain, memory=ilp[1]["memory_limit"], bandwidth=math.inf, gpus=2, method="pipedream",
                                  n_batches=60, memory_model="paper")

    def spoiled(task, instance, inp, _mid=ilp[1]["key"], _top=ilp[2]["key"],
                _slow=(slow.objective, slow.peak_memory, json.dumps(slow.schedule.to_json()))):
        row = run_task(task, instance, inp)
        if task["key"] == _mid:
            row.update(status="time_limit", objective=_slow[0], peak_memory=_slow[1], predicted=_slow[0],
                       schedule=_slow[2], bound=0.0, gap=1.0)
        elif task["key"] == _top:
            row.update(status="no_solution", objective=None, peak_memory=None, predicted=None, schedule=None,
                       bound=0.0, gap=None)
        return row

    out = tmp_path / "out"
    st = run_sweep(tasks, inputs, out, workers=1, progress=False, task_fn=spoiled)
    df = read_results(out).sort_values("memory_limit").reset_index(drop=True)
    first = df.iloc[0]
    assert first.objective < slow.objective * (1 - 1e-3)        # the spoiled row is really worse
    assert st.carried == 2 and pd.isna(first.carried_from)
    td = task_data(chain, None, "paper")
    for k in (1, 2):
        r = df.iloc[k]
        assert r.carried_from == pytest.approx(first.memory_limit)
        assert r.objective == pytest.approx(first.objective)
        sim = simulate_pattern(Pattern.from_json(json.loads(r.schedule)), td, gpus=2)
        assert sim.period == pytest.approx(r.objective) and sim.peak_memory <= r.memory_limit
        assert r.gap == pytest.approx((r.objective - r.bound) / r.objective)
    assert df.iloc[1].status == "time_limit" and f"period {slow.objective:.6g}" in df.iloc[1].message
    assert df.iloc[2].status == "feasible" and "no pattern" in df.iloc[2].message
    assert carry_forward(out, tasks) == 0
    assert same_rows(df, read_results(out)) == []


def test_a_task_that_kills_its_worker_is_retried_once_then_an_error_row(tmp_path):
    """A task that kills its worker process every time it runs is run twice (one retry) and recorded
    as an error row; the other tasks finish."""
    from memplan.experiments.sweep_engine import run_sweep, run_task

    tasks, inputs = _pipeline_tasks([0.75, 1.0], ["ilp", "pipedream"])
    head = min((t for t in tasks if t["method"] == "ilp"), key=lambda t: t["memory_limit"])
    marks = tmp_path / "tries"
    marks.mkdir()

    def crashing(task, instance, inp, _head=head["key"], _marks=str(marks)):
        import os as _os
        import uuid as _uuid

        if task["key"] == _head:
            open(_os.path.join(_marks, _uuid.uuid4().hex), "w").close()
            _os._exit(3)                                        # the worker process dies
        return run_task(task, instance, inp)

    import dask

    t0 = time.time()
    # workers forked from this process (already importing memplan) restart in a fraction of a second
    with dask.config.set({"distributed.worker.multiprocessing-method": "fork"}):
        st = run_sweep(tasks, inputs, tmp_path / "out", workers=2, progress=False, task_fn=crashing)
    df = read_results(tmp_path / "out")
    assert len(df) == len(tasks) and st.failed == 1
    bad = df[df.key == head["key"]].iloc[0]
    assert bad.status == "error" and "KilledWorker" in bad.error
    assert len(list(marks.iterdir())) == 2                       # tried, then retried once
    good = df[df.key != head["key"]]
    assert (good.status != "error").all() and good.objective.notna().all()
    assert time.time() - t0 < 60


def test_run_options_may_come_before_the_experiment_name(tmp_path):
    from memplan.experiments.cli import build_parser
    from memplan.experiments.sweeps import merge_run_options

    out = tmp_path / "o"
    assert main(["sweep", "--workers", "1", "-o", str(out), "-q", "--no-plot", "remat", "--instance", TOY,
                 "--methods", "rotor", "--points", "2"]) == 0
    assert len(read_results(out)) == 2
    assert "to solve on in-process" in (out / "sweep.log").read_text()
    a = build_parser().parse_args(["sweep", "--workers", "2", "--scheduler", "tcp://h:1", "--csv", "remat",
                                   "--instance", TOY])
    merge_run_options(a)
    assert (a.workers, a.scheduler, a.csv, a.out) == (2, "tcp://h:1", True, None)
    # given on both sides: refused (the one after the name had won, silently)
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["sweep", "--workers", "2", "remat", "--instance", TOY, "--workers", "3"])
    assert e.value.code == 2


@pytest.mark.long
def test_ctrl_c_on_a_local_cluster_sweep_is_one_line(tmp_path):
    """Ctrl-C reaches the whole process group: each worker process printed a KeyboardInterrupt
    traceback before the sweep said "interrupted". The workers now start with SIGINT ignored; the
    sweep closes the cluster, which stops them, and resumes where it stopped."""
    import os
    import signal
    import subprocess
    import sys

    import memplan

    inst = tmp_path / "r60.json"
    memplan.save_instance(memplan.random_chain(60, 3), inst)
    cmd = [sys.executable, "-m", "memplan.experiments.cli", "sweep", "remat", "--instance", str(inst),
           "--methods", "rotor-floating,remat-milp", "--points", "12", "--time-limit", "5", "--workers", "2",
           "--no-plot", "-o", str(tmp_path / "o")]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    err = b""
    while b"1/24" not in err and p.poll() is None:        # the cluster is up and a task is done
        err += os.read(p.stderr.fileno(), 4096)
    os.killpg(p.pid, signal.SIGINT)
    rest = p.communicate(timeout=120)[1]
    err = (err + rest).decode()
    assert p.returncode == 130 and "interrupted" in err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-2000:]


def test_the_progress_bar_of_an_in_process_sweep_counts_one_task_running(tmp_path, capsys):
    """``--workers 1`` solves one task at a time, but its bar said ``running=3`` after the first of four
    tasks (the tasks left, under the name of those running)."""
    from memplan.experiments.sweep_engine import Grid, expand, run_sweep, run_task

    tasks, inputs = expand([Grid("remat", [TOY], methods=["rotor", "sequential"], memory=["90MiB", "100MiB"])])
    assert len(tasks) == 4
    run_sweep(tasks, inputs, tmp_path / "out", workers=1, progress=True, task_fn=run_task)
    err = capsys.readouterr().err
    import re
    running = [int(n) for n in re.findall(r"running=(\d+)", err)]
    assert running and max(running) == 1 and running[-1] == 0, err[-500:]


def test_a_slow_phase_of_the_grid_says_so_before_the_progress_bar(monkeypatch, capsys):
    """The grid's preparation runs before the progress bar: a pipeline series' baseline points (no time
    limit: GPipe's on 23 GPUs took 45 s for PipeDream's ResNet-18 profile) or a chain's memory range.
    A phase still running after a second says so on stderr, and its time when it ends; a quick one,
    or any with progress off (``-q``), prints nothing."""
    from memplan.experiments import sweep_engine
    from memplan.experiments.sweep_engine import Grid, expand

    def slow_range(problem, chain, **kw):
        time.sleep(1.3)
        return 80e6, 110e6

    monkeypatch.setattr(sweep_engine, "memory_range", slow_range)
    tasks, _ = expand([Grid("remat", [TOY], methods=["rotor"], points=2)], progress=True)
    assert [t["memory_limit"] for t in tasks] == [80e6, 110e6]
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and "memory range of paper004-table2" in lines[0] and lines[0].endswith("...")
    assert float(lines[1].rsplit(": ", 1)[1].rstrip("s")) >= 1.3
    expand([Grid("remat", [TOY], methods=["rotor"], points=2)], progress=False)
    monkeypatch.setattr(sweep_engine, "memory_range", lambda problem, chain, **kw: (80e6, 110e6))
    expand([Grid("remat", [TOY], methods=["rotor"], points=3)], progress=True)
    assert capsys.readouterr().err == ""


def test_a_resumed_sweep_spaces_its_limits_as_the_first_run_did(tmp_path):
    """With a time limit below the estimated time of remat's exact minimum, the bottom of the memory
    range is a baseline's replayed peak, and what it is depends on the machine and on the process (a
    minimum computed earlier is cached and taken). A rerun into the same folder computed other limits,
    matched none of the rows written, solved every task again and left two sets of rows. The first
    run's range is recorded in the folder and read back; --fresh computes it again."""
    import memplan
    from memplan.experiments.sweep_engine import Source

    spec = "random:400:23"                  # the exact minimum: estimated 0.19 s, over the 0.05 s limit
    out = tmp_path / "r"
    argv = ["sweep", "remat", "--instance", spec, "--methods", "store-all", "--points", "3", "--time-limit", "0.05",
            "--workers", "1", "-q", "--no-plot", "-o", str(out)]
    assert main(argv) == 0
    first = read_results(out)
    assert len(first) == 3
    chain = Source(spec).load()[0]
    exact, top = memplan.remat.memory_range(chain)       # no time limit: computed, and cached in this process
    assert first.memory_limit.max() == pytest.approx(top)
    assert first.memory_limit.min() > exact * 1.01       # the first run's bottom was the fallback
    # with the exact minimum cached the same settings give another range: the resumed run keeps the first's
    assert memplan.remat.memory_range(chain, time_limit=0.05)[0] == pytest.approx(exact)
    assert main(argv) == 0
    df = read_results(out)
    assert len(df) == 3 and df.run_id.nunique() == 1
    assert sorted(df.memory_limit) == sorted(first.memory_limit)
    # --fresh drops the table and the record: the range is computed again (the exact minimum, cached now)
    assert main(argv + ["--fresh"]) == 0
    df = read_results(out)
    assert len(df) == 3 and df.memory_limit.min() == pytest.approx(exact) and df.memory_limit.max() == pytest.approx(top)
    assert main(argv) == 0 and len(read_results(out)) == 3


def _experiment_args(mod, argv):
    import argparse

    p = argparse.ArgumentParser()
    mod.add_arguments(p)
    return p.parse_args(argv)


def test_remat_offload_and_offload_figure_3_build_their_grid_within_the_time_limit(monkeypatch, capsys):
    """remat-offload and the offload Figure 3 space their limits from rotor's minimum memory, which they
    computed with no time limit while the grid was built (O(L^3): 4 s at 1500 stages, 40 s at 3000,
    before any progress bar). With --time-limit, where the exact minimum is estimated to take longer,
    the grid starts from the least peak of the baselines instead (a plan fits there), and says so."""
    import memplan
    from memplan.baselines import remat_min_memory
    from memplan.baselines.remat_heuristics import bisection_schedule, store_all
    from memplan.experiments import offload_figures, remat_offload_figures
    from memplan.experiments.sweep_engine import Source
    from memplan.models.remat import simulate_remat

    spec = "random:400:41"                  # the exact minimum: estimated 0.19 s, over the 0.05 s limit

    def exact(*a, **k):
        raise AssertionError("the exact minimum was computed past the time limit")

    monkeypatch.setattr(remat_min_memory, "_get", exact)
    common = ["--instance", spec, "--bandwidth", "1GB/s", "--points", "2", "--time-limit", "0.05", "-q"]
    t0 = time.perf_counter()
    ro = remat_offload_figures.grids(_experiment_args(remat_offload_figures, common + ["--slots", "10", "--low", "1"]))
    off = offload_figures.grids(_experiment_args(offload_figures, common + ["--figures", "3", "--methods", "greedy"]))
    assert time.perf_counter() - t0 < 5
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert err.count("over --time-limit 0.05") == 2, err
    chain = Source(spec).load()[0]
    least = memplan.baselines.remat_min_memory.min_memory(chain)        # exact, now
    bisection = simulate_remat(chain, bisection_schedule(chain)).peak_memory
    lo = min(min(g.memory) for g in ro)          # --low 1: rotor's minimum as the grid has it
    assert least * 1.01 < lo <= bisection * (1 + 1e-12)      # not the exact minimum, a peak at which a plan fits
    assert max(max(g.memory) for g in ro) == pytest.approx(store_all(chain).peak_memory * 1.02)
    from memplan.models.offload import min_feasible_memory
    assert min(min(g.memory) for g in off) == pytest.approx(min(min_feasible_memory(chain), lo))


def test_rotor_minimum_memory_without_a_time_limit_shows_progress(monkeypatch, capsys):
    """remat-offload (no time limit by default) computes rotor's exact minimum memory while it builds
    its grid: still running after a second, it says so on stderr, and its time when it ends."""
    from memplan.baselines import remat_min_memory
    from memplan.experiments import remat_offload_figures

    def slow(chain):
        time.sleep(1.3)
        return 80e6

    monkeypatch.setattr(remat_min_memory, "min_memory", slow)
    argv = ["--instance", TOY, "--bandwidth", "1GB/s", "--points", "2", "--slots", "10", "--low", "1"]
    grids = remat_offload_figures.grids(_experiment_args(remat_offload_figures, argv))
    assert min(min(g.memory) for g in grids) == 80e6
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and "rotor's minimum memory of paper004-table2" in lines[0], lines
    assert "no time limit" in lines[0] and lines[0].endswith("...")
    assert float(lines[1].rsplit(": ", 1)[1].rstrip("s")) >= 1.3
    remat_offload_figures.grids(_experiment_args(remat_offload_figures, argv + ["-q"]))
    assert capsys.readouterr().err == ""


def test_a_resumed_remat_offload_sweep_keeps_the_limits_of_its_first_run(tmp_path):
    """Its limits start from rotor's minimum memory, which past --time-limit is a baseline's peak
    (another value once the exact minimum is cached in the process): recorded in the folder, so the
    rerun finds every row it wrote."""
    import memplan
    from memplan.experiments.sweep_engine import Source

    spec = "random:400:43"
    out = tmp_path / "ro"
    argv = ["sweep", "remat-offload", "--instance", spec, "--bandwidth", "1GB/s", "--slots", "10", "--no-offload",
            "--points", "2", "--time-limit", "0.05", "--workers", "1", "-q", "--no-plot", "-o", str(out)]
    assert main(argv) == 0
    first = read_results(out)
    memplan.baselines.remat_min_memory.min_memory(Source(spec).load()[0])       # cached from now on
    assert main(argv) == 0
    df = read_results(out)
    assert len(df) == len(first) and df.run_id.nunique() == 1
    assert sorted(set(df.memory_limit)) == sorted(set(first.memory_limit))
