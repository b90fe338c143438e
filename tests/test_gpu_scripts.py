"""Issue 20's GPU scripts, dry-run on the CPU: ``gpu_profile --device cpu --quick`` writes instance
files with the provenance the issue asks for and no GPU field, platform or host-link number made up;
``runtime_check --device cpu --quick`` writes one row per (network, limit, method) with autograd's
gradients and the simulator's peaks; the paper 004 comparison has its strategies. The tests whose
name says cuda run only on a GPU machine (the campaign runs them there: ``pytest -k cuda``)."""
import csv
import json
import statistics
import math
import tarfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from memplan.experiments import gpu_profile, runtime_check  # noqa: E402
from memplan.models.instance import load_instance, shipped_dir  # noqa: E402
from memplan.models.networks import count_parameters, get_model  # noqa: E402
from memplan.models.profiler import device_info, host_link_platform, measure_host_link  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

GPU_KEYS = {"gpu", "gpu_memory_bytes", "driver", "cuda", "cudnn", "compute_capability", "multiprocessors",
            "tf32_matmul", "tf32_cudnn", "cudnn_benchmark"}
# what the issue asks every instance to say: GPU model (device/gpu), driver, torch and CUDA versions,
# date, batch, input shape, dtype, how it was linearized, how each quantity was measured
PROVENANCE = {"device", "torch", "date", "batch", "input", "dtype", "linearization", "groups", "timing",
              "memory_measurement", "measurement", "host_link", "network", "setting", "setting_source", "command"}
CUDA = torch.cuda.is_available()


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _num(x):
    return None if x in ("", None) else float(x)


# ------------------------------------------------------------------------------------- gpu_profile
@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpu_profile")
    rc = gpu_profile.main(["--device", "cpu", "--quick", "--threads", "1", "--out", str(d / "inst"),
                           "--summary", str(d / "summary.csv"), "--host-link-json", str(d / "link.json"),
                           "--tar", str(d / "inst.tar.gz")])
    return rc, d


def test_dry_run_profile_writes_instances_with_provenance(profiled):
    rc, d = profiled
    assert rc == 0
    files = sorted(p.name for p in (d / "inst").glob("*.json"))
    assert files == ["dryrun-gpt2-b2-s8-cpu.json", "dryrun-resnet18-b2-32-cpu.json"]
    for name in files:
        raw = json.loads((d / "inst" / name).read_text())
        prov = raw["provenance"]
        assert PROVENANCE <= set(prov), PROVENANCE - set(prov)
        assert set(raw["provenance"]["measurement"]) == {"u_f", "u_b", "a", "abar", "delta", "o_f", "o_f_all", "o_f_ng",
                                                      "o_b", "W"}
        # nothing about a GPU is made up on a CPU: no GPU key, no platform, no host-link number
        assert not GPU_KEYS & set(prov), GPU_KEYS & set(prov)
        assert "platform" not in raw
        assert prov["host_link"]["measured"] is False and "not measured" in prov["host_link"]["note"]
        assert not any("bytes_per_s" in k for k in prov["host_link"])
        assert prov["device"] == "cpu" and prov["dtype"] == "float32"
        chain, platform = load_instance(d / "inst" / name)
        assert platform is None


def test_dry_run_profile_values(profiled):
    """Sizes the profiler cannot get wrong without being wrong: a^0, the parameters' bytes, L."""
    rc, d = profiled
    r18, _ = load_instance(d / "inst" / "dryrun-resnet18-b2-32-cpu.json")
    # as at 224 (README's table): stem conv, BN+ReLU, max-pool, 8 blocks, pool and its flattened view in
    # one stage; fc in the loss
    assert r18.L == 12 and r18.stage_names[-1] == "fc+loss"
    assert r18.wa[0] == 2 * 3 * 32 * 32 * 4
    assert r18.weights.sum() == count_parameters(get_model("resnet18")) * 4
    assert r18.provenance["batch"] == 2 and r18.provenance["input"] == [3, 32, 32]
    g, _ = load_instance(d / "inst" / "dryrun-gpt2-b2-s8-cpu.json")
    # embedding, (attention, MLP) per block, ln_f; the head is folded into the loss stage
    assert g.L == 6 and g.wd[0] == 0                        # token ids have no gradient
    m = get_model("gpt2", **g.provenance["model_kw"])
    # the head's weight is tied to the token embedding: it counts in both stages that read it
    assert g.weights.sum() == (count_parameters(m) + m.lm_head.weight.numel()) * 4


def test_dry_run_profile_summary_tar_and_link(profiled):
    rc, d = profiled
    rows = _rows(d / "summary.csv")
    assert list(rows[0]) == gpu_profile.SUMMARY_COLUMNS
    assert [r["status"] for r in rows] == ["ok", "ok"] and [r["gpu"] for r in rows] == ["", ""]
    with tarfile.open(d / "inst.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["instances/dryrun-gpt2-b2-s8-cpu.json",
                                          "instances/dryrun-resnet18-b2-32-cpu.json"]
    assert json.loads((d / "link.json").read_text()) == {"measured": False, "device": "cpu"}


def test_existing_files_are_kept(profiled, tmp_path):
    rc, d = profiled
    before = {p.name: p.read_bytes() for p in (d / "inst").glob("*.json")}
    assert gpu_profile.main(["--device", "cpu", "--quick", "--out", str(d / "inst"),
                             "--summary", str(tmp_path / "s.csv")]) == 0
    assert [r["status"] for r in _rows(tmp_path / "s.csv")] == ["exists", "exists"]
    assert {p.name: p.read_bytes() for p in (d / "inst").glob("*.json")} == before


def test_refusals_are_one_line_with_status_2(tmp_path, capsys):
    assert gpu_profile.main(["--device", "cpu", "--quick", "--out", str(shipped_dir())]) == 2
    assert "dry run" in capsys.readouterr().err
    assert gpu_profile.main(["--device", "cpu", "--out", str(tmp_path), "--models", "resnet19"]) == 2
    err = capsys.readouterr().err
    assert "resnet19" in err and "resnet50-b32-224" in err and err.count("\n") == 1
    assert gpu_profile.main(["--device", "tpu", "--out", str(tmp_path)]) == 2
    assert runtime_check.main(["--models", "vgg16"]) == 2
    assert runtime_check.main(["--fractions", "0.5,2"]) == 2
    if not CUDA:
        assert gpu_profile.main(["--device", "cuda", "--out", str(tmp_path)]) == 2
        assert "no CUDA device" in capsys.readouterr().err
        assert runtime_check.main(["--device", "cuda"]) == 2


def test_settings_cover_the_issue():
    """Issue 20, item 1: ResNet-18..152 and DenseNet-121 at 224 (batch 32 and 8), ResNet-18 at 1000,
    Inception v3 at 299, VGG-16, pre-activation ResNet-1001, GPT-2 small: at least ten files."""
    keys = {(s.network, s.batch, s.input) for s in gpu_profile.SETTINGS}
    for n in ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "densenet121"):
        assert (n, 32, (3, 224, 224)) in keys and (n, 8, (3, 224, 224)) in keys
    assert ("resnet18", 8, (3, 1000, 1000)) in keys
    assert any(n == "inception_v3" and i == (3, 299, 299) for n, _, i in keys)
    assert {"vgg16", "preact_resnet1001", "gpt2"} <= {n for n, _, _ in keys}
    assert [s for s in gpu_profile.SETTINGS if s.network == "gpt2"][0].input == (1024,)
    assert len({s.key for s in gpu_profile.SETTINGS}) == len(gpu_profile.SETTINGS) >= 10
    assert [s.key for s in gpu_profile.select("resnet50,gpt2", False)] == \
        ["resnet50-b32-224", "resnet50-b8-224", "gpt2-small-b8-s1024"]


def test_no_host_link_on_a_cpu():
    with pytest.raises(ValueError, match="not a CUDA device"):
        measure_host_link("cpu")
    assert host_link_platform(None, "cpu") is None
    prov, raw = gpu_profile.host_link("cpu", 2**20, 3)
    assert raw is None and prov["measured"] is False
    assert not GPU_KEYS & set(device_info("cpu"))
    assert gpu_profile.device_tag("cpu") == "cpu"


# ------------------------------------------------------------------------------------ runtime_check
@pytest.fixture(scope="module")
def runtime_rows(tmp_path_factory):
    d = tmp_path_factory.mktemp("runtime")
    # the dispatch tracker: byte-exact per-operation traces (test_dry_run_with_allocator_events: the default)
    rc = runtime_check.main(["--device", "cpu", "--quick", "--memory-method", "dispatch", "--out", str(d / "rt.csv"),
                             "--throughput", str(d / "thr.csv"), "--traces", str(d / "traces.json")])
    return rc, _rows(d / "rt.csv"), _rows(d / "thr.csv"), json.loads((d / "traces.json").read_text())


def test_dry_run_runtime_rows(runtime_rows):
    rc, rows, _, traces = runtime_rows
    times = {(t["network"], tag): t["times"] for t in traces["timings"] for tag in [t["contender"], *t["also"]]}
    assert rc == 0
    assert list(rows[0]) == runtime_check.COLUMNS
    nets = runtime_check.PRESETS["quick"]
    keys = [(r["network"], float(r["fraction"]), r["method"]) for r in rows]
    expected = [(n, f, m) for n in nets for f in (0.25, 0.5, 0.75) for m in runtime_check.METHODS]
    expected += [(n, 1.0, m) for n in nets for m in ("store-all", "autograd")]
    assert sorted(keys) == sorted(expected)
    for r in rows:
        # a CPU run names the CPU and leaves every GPU column empty
        assert r["device"].startswith("cpu") and r["gpu"] == r["cuda"] == r["cudnn"] == r["driver"] == ""
        if r["method"] == "store-all" and float(r["fraction"]) < 1:
            # store-all needs its own peak, above every limit below fraction 1: no plan, no measurement
            assert r["status"] == "no_solution" and r["measured_peak"] == ""
            continue
        assert r["grads_equal"] == "True", r
        if r["method"] != "autograd":
            # the time over plain autograd's, paired round by round: the median of the rounds' ratios
            tag = r["same_as"] or f"{r['method']}@{float(r['fraction']):g}"
            ta, tb = times[(r["network"], tag)], times[(r["network"], "autograd")]
            v = statistics.median(x / y for x, y in zip(ta, tb))
            assert float(r["vs_autograd"]) == pytest.approx(v)
            assert float(r["vs_autograd_low"]) <= v <= float(r["vs_autograd_high"])
            # the 10th-percentile sample, from the rounds
            assert float(r["time_q10"]) == pytest.approx(sorted(ta)[len(ta) // 10])
            assert float(r["time_min"]) <= float(r["time_q10"]) <= float(r["measured_time"])
        batch, t = int(r["batch"]), float(r["measured_time"])
        assert float(r["throughput"]) == pytest.approx(batch / t)
        pred, meas = float(r["predicted_peak"]), float(r["measured_peak"])
        if r["method"] == "autograd":
            # plain loss.backward() on the unsplit model: issue 27's parity, memplan's executed store-all
            # needs at most 3% more than it (the tiny GPT-2 here: autograd needs 3.7% more, as it sums
            # the tied head/embedding weight's two gradients in a buffer the executor does not need)
            sa = next(q for q in rows if q["network"] == r["network"] and q["method"] == "store-all"
                      and float(q["fraction"]) == 1)
            assert float(sa["measured_peak"]) <= 1.03 * meas, (r, sa)
        else:
            # the executor runs the sequence on the stages the chain was profiled from, and the CPU
            # tracker counts exact storage bytes: the simulated peak to the byte. The replay charges
            # each forward its own overhead (Chain.of_all, of_ng); when it charged both the larger
            # o_f, the tiny GPT-2 here measured up to 6.4% below it (57984 vs 61952 bytes) wherever
            # the solver's sequence, which depends on the timings, peaked in an F_all. Run without holds
            # (--holds auto, the default since 2026-11-29: these single-tensor networks have the free
            # record) against the free replay, a group that starts at the loss is called directly and
            # holds the loss scalar and its seed until it returns (models.runtime._backward_from): 8 bytes
            assert r["holds"] == "none", r
            assert 0 <= meas - pred <= 8, r
        if float(r["fraction"]) < 1:
            limit = float(r["memory_limit"])
            assert pred <= limit * (1 + 1e-9) and r["within_limit"] == "True"
        else:
            assert r["within_limit"] == ""


def test_dry_run_with_allocator_events(tmp_path):
    """``--memory-method profiler`` (the default): every contender measured by c10's allocator events, which see the
    CPU convolutions' scratch that the dispatch tracker does not. Each plan's peak is its replay's on
    the chain profiled the same way (within a loss scalar), the timed runs' (held where the replay
    peaks) too, and autograd's is at least 1 MiB above what the dispatch tracker gives it."""
    out = tmp_path / "rt.csv"
    rc = runtime_check.main(["--device", "cpu", "--quick", "--models", "resnet18",
                             "--fractions", "0.5", "--methods", "rotor,sequential", "--out", str(out)])
    assert rc == 0
    rows = [r for r in _rows(out) if r["measured_peak"]]
    assert {r["method"] for r in rows} == {"rotor", "sequential", "store-all", "autograd"}
    assert {r["memory_method"] for r in rows} == {runtime_check.MEMORY_METHOD_NAMES["profiler"]}
    for r in rows:
        assert r["grads_equal"] == "True"
        meas = float(r["measured_peak"])
        if r["method"] != "autograd":
            assert float(r["predicted_peak"]) <= meas <= float(r["predicted_peak"]) + 16, r
            assert float(r["timed_peak"]) == meas, r
    ag = next(r for r in rows if r["method"] == "autograd")
    case = runtime_check.Case("resnet18", runtime_check.PRESETS["quick"]["resnet18"], "cpu", 1, memory="dispatch")
    assert float(ag["measured_peak"]) > case.autograd()["measured_peak"] + 2**20


def test_dry_run_under_autocast(tmp_path):
    """``--autocast bfloat16``: every contender's forward in a bfloat16 autocast block of its own, the
    backward after it. The rows say so; each plan's measured peak is its replay's on the chain profiled
    under the same autocast (within a loss scalar; with autocast's weight cache, as the executor ran
    before, the cast weights lived to the end of the step, unseen by the profile: 1.96-1.98x the
    prediction here); the gradients are plain autograd's under the same autocast, bit for bit."""
    out = tmp_path / "rt.csv"
    rc = runtime_check.main(["--device", "cpu", "--quick", "--models", "resnet18", "--autocast", "bfloat16",
                             "--fractions", "0.25,0.75", "--methods", "rotor", "--out", str(out)])
    assert rc == 0
    rows = [r for r in _rows(out) if r["measured_peak"]]
    assert {r["method"] for r in rows} == {"rotor", "store-all", "autograd"} and len(rows) == 4
    for r in rows:
        assert r["autocast"] == "bfloat16" and r["grads_equal"] == "True", r
        if r["method"] != "autograd":
            meas = float(r["measured_peak"])
            assert float(r["predicted_peak"]) <= meas <= float(r["predicted_peak"]) + 16, r


def test_dry_run_throughput_comparison(runtime_rows):
    _, rows, thr, traces = runtime_rows
    times = {(t["network"], tag): t["times"] for t in traces["timings"] for tag in [t["contender"], *t["also"]]}

    def paired(net, a, b):
        """the median of the per-round ratios, recomputed from the rounds' times"""
        ta, tb = times[(net, a)], times[(net, b)]
        assert len(ta) == len(tb) >= 2
        return statistics.median(x / y for x, y in zip(ta, tb))

    checked = 0
    assert list(thr[0]) == runtime_check.THROUGHPUT_COLUMNS
    by = {}
    for r in thr:
        by.setdefault(r["network"], []).append(r)
    for net, rs in by.items():
        L = int(rs[0]["L"])
        segs = runtime_check.segment_counts(L, 3)
        assert sorted({int(float(r["segments"])) for r in rs if r["strategy"] == "sequential"}) == segs
        strategies = {r["strategy"] for r in rs}
        # torch's own checkpoint_sequential runs on both (non-reentrant where the input is token ids)
        assert strategies == {"store-all", "sequential", "rotor", "checkpoint_sequential"}
        seq = {int(float(r["segments"])): r for r in rs if r["strategy"] == "sequential"}
        for r in rs:
            if r["strategy"] == "rotor":
                s = seq[int(float(r["segments"]))]
                # rotor is solved at the memory sequential needs, and its gain is the throughput ratio
                assert float(r["memory_limit"]) == float(s["predicted_peak"])
                assert float(r["predicted_peak"]) <= float(r["memory_limit"]) * (1 + 1e-9)
                # on the chain it was solved on (the re-timed chain of predicted_time is measured later)
                assert float(r["predicted_time_profile"]) <= float(s["predicted_time_profile"]) * (1 + 1e-9)
                # its gains are paired round by round: the median of rotor's time over the other's in
                # the same round (not the ratio of the two medians)
                k = int(float(r["segments"]))
                tag = f"rotor@sequential:{k}"
                checked += 1
                assert float(r["rotor_gain"]) == pytest.approx(1 / paired(net, tag, f"sequential:{k}") - 1)
                v = paired(net, tag, f"checkpoint_sequential:{k}")
                assert float(r["vs_checkpoint_sequential"]) == pytest.approx(v)
                assert float(r["gain_vs_checkpoint_sequential"]) == pytest.approx(1 / v - 1)
                lo, hi = float(r["vs_checkpoint_sequential_low"]), float(r["vs_checkpoint_sequential_high"])
                assert lo <= v <= hi
                assert (r["not_slower_than_checkpoint_sequential"] == "True") == (lo <= 1)
            if r["strategy"] == "sequential":
                k = int(float(r["segments"]))
                v = paired(net, f"sequential:{k}", f"checkpoint_sequential:{k}")
                assert float(r["vs_checkpoint_sequential"]) == pytest.approx(v)
            if r["strategy"] == "checkpoint_sequential":
                # PyTorch's implementation keeps what memplan's model of it says (and autograd's gradients)
                s = seq[int(float(r["segments"]))]
                # PyTorch's own checkpoint_sequential is not memplan's executor: it keeps a few tensors
                # the model does not (and frees others earlier); measured: within 0.35% at 2, 6, 10
                # segments (ResNet-18, 32x32, batch 2)
                if net == "resnet18":
                    assert float(r["measured_peak"]) == pytest.approx(float(s["predicted_peak"]), rel=0.004)
                else:       # token ids: the non-reentrant variant, which keeps more; memplan's is leaner
                    assert float(s["measured_peak"]) <= float(r["measured_peak"])
                assert r["grads_equal"] == "True"
            elif r["measured_peak"]:
                # memplan's executor (store-all, sequential, rotor) and the simulator agree to the byte,
                # but the loss scalar and its seed that a direct call holds without holds (8 bytes)
                assert r["holds"] == "none", r
                assert 0 <= float(r["measured_peak"]) - float(r["predicted_peak"]) <= 8, r

    assert checked == sum(len(runtime_check.segment_counts(int(rs[0]["L"]), 3)) for rs in by.values())


def test_dry_run_traces(runtime_rows):
    """The per-operation traces: one value per operation, those of the fully held measure run, which
    follows paper 004's replay to the byte; the row's peak is the run without holds (``--holds auto``
    on these networks), at most that."""
    _, rows, _, traces = runtime_rows
    peaks = {(r["network"], f"{r['method']}@{float(r['fraction']):g}"): float(r["measured_peak"]) for r in rows
             if r["measured_peak"] and not r["same_as"]}
    assert {r["holds"] for r in rows} == {"none"}
    seen = 0
    for t in traces["sequences"]:
        n = len(t["ops"])
        assert len(t["measured_during"]) == len(t["simulated_during"]) == len(t["measured_after"]) == n
        assert t["measured_during"] == t["simulated_during"] and t["measured_after"] == t["simulated_after"]
        if (t["network"], t["sequence"]) in peaks:
            assert peaks[(t["network"], t["sequence"])] <= max(t["measured_during"]) + 8
            seen += 1
    assert seen == len(peaks) - 2          # every executed plan but autograd (no sequence) of each network


def test_segment_counts_are_the_papers():
    """Paper 004, section 5.4: 10 numbers of segments from 2 to 2 sqrt(L)."""
    assert runtime_check.segment_counts(100) == list(range(2, 21, 2))
    c = runtime_check.segment_counts(73)
    assert len(c) == 10 and c[0] == 2 and c[-1] == round(2 * math.sqrt(73))
    assert runtime_check.segment_counts(4) == [2, 3, 4]
    assert runtime_check.segment_counts(1) == [1]


# ------------------------------------------------------------------------------------- on a GPU only
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device (runs in the GPU campaign)")
def test_cuda_profile_quick_has_gpu_provenance_and_measured_link(tmp_path):
    assert gpu_profile.main(["--device", "cuda", "--quick", "--out", str(tmp_path), "--host-link-mib", "64"]) == 0
    for f in tmp_path.glob("*.json"):
        raw = json.loads(f.read_text())
        prov = raw["provenance"]
        assert prov["gpu"] == torch.cuda.get_device_name() and prov["cuda"] == torch.version.cuda
        assert GPU_KEYS <= set(prov)
        link = prov["host_link"]
        assert link["measured"] is True and link["h2d_bytes_per_s"] > 1e9 and link["d2h_bytes_per_s"] > 1e9
        chain, platform = load_instance(f)
        assert platform.memory == torch.cuda.get_device_properties(0).total_memory
        assert platform.bandwidth == pytest.approx(min(link["h2d_bytes_per_s"], link["d2h_bytes_per_s"]), rel=1e-9)


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device (runs in the GPU campaign)")
def test_cuda_runtime_check_quick(tmp_path):
    out = tmp_path / "rt.csv"
    assert runtime_check.main(["--device", "cuda", "--quick", "--workers", "1", "--out", str(out)]) == 0
    for r in _rows(out):
        assert r["gpu"] == torch.cuda.get_device_name()
        if r["measured_peak"]:
            assert r["grads_equal"] == "True", r
            assert r["within_limit"] in ("True", ""), r


def _script(name: str):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[1] / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_timing_noise_dry_run_on_cpu(tmp_path, capsys):
    """gpu_timing_noise's CPU dry run: every way of timing has one row per run (the batched mean
    one per --batch-steps runs), no CUDA events on a CPU, and on a CPU (nothing queued) the launch
    time is the step's time within a millisecond."""
    out = tmp_path / "noise.csv"
    assert _script("gpu_timing_noise").main(["--device", "cpu", "--network", "resnet18", "--batch", "2",
                                             "--size", "32", "--runs", "4", "--batch-steps", "2",
                                             "--out", str(out)]) == 0
    rows = _rows(out)
    count = {}
    for r in rows:
        count[r["mode"]] = count.get(r["mode"], 0) + 1
    assert count == {"wall": 4, "launch": 4, "batched": 2, "wall-det": 4, "launch-det": 4, "batched-det": 2}
    wall = {int(r["run"]): float(r["seconds"]) for r in rows if r["mode"] == "wall"}
    launch = {int(r["run"]): float(r["seconds"]) for r in rows if r["mode"] == "launch"}
    assert all(0 <= wall[i] - launch[i] < 1e-3 for i in wall)
    assert "launch / wall (median)" in capsys.readouterr().out


@pytest.mark.parametrize("args, names", [
    (["--fractions", "1,2"], "--fractions"), (["--fractions", "1,1"], "--fractions"),
    (["--deadline", "0"], "--deadline"), (["--steps-per-sample", "0"], "--steps-per-sample"),
    (["--save-offload", "/tmp/x"], "--save-offload"),
])
def test_bench_budget_refuses_bad_options_in_one_line(args, names, capsys):
    assert _script("bench_budget").main(args + ["--quick"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("bench_budget: error: ") and names in err


def test_offload_exec_dry_run_on_cpu(tmp_path):
    """bench_offload_exec on the CPU (host emulated; times by formula, so the schedules do not depend on
    this machine): every executed schedule's gradients equal plain autograd's, its measured peak is
    within its limit and not above the planned schedule's simulated peak (the emulation's transfers
    take no time), and at the tight limit something is offloaded."""
    out = tmp_path / "offload.csv"
    assert _script("bench_offload_exec").main(["--device", "cpu", "--quick", "--network", "gpt2", "--fractions",
                                               "0.1,0.7", "--methods", "greedy", "--max-rounds", "4",
                                               "--fixed-times", "--out", str(out)]) == 0
    rows = _rows(out)
    assert [r["fraction"] for r in rows] == ["0.1", "0.7"]
    for r in rows:
        assert r["grads_equal"] == "True"
        assert float(r["measured_peak"]) <= float(r["memory_limit"])
        assert float(r["measured_peak"]) <= float(r["predicted_peak"]) + 1e-6
        # the executor's stream order with each forward's own overhead is what it measures, to the byte
        assert abs(float(r["measured_peak"]) - float(r["predicted_peak_stream"])) <= 1.0
    assert len(rows[0]["offloaded"].split()) >= 2


@pytest.mark.parametrize("args, says", [
    (["--times-from", "instances/no-such-file.json"], "--times-from instances/no-such-file.json"),
    (["--times-from", "instances/gpt2-small-b8-s1024-h100.json"], "L = 26, the network's chain has L = 6"),
    (["--times-from", "instances/gpt2-small-b8-s1024-h100.json", "--fixed-times"], "--times-from and --fixed-times"),
    (["--batch", "0"], "--batch"),
])
def test_offload_exec_times_from_refuses_in_one_line(args, says, capsys, monkeypatch):
    """--times-from takes another chain's stage times (a GPU plan's shape replayed on a CPU): a missing
    file, a chain of another length, or two sources of times are refused with exit status 2 and one
    line saying which."""
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    assert _script("bench_offload_exec").main(["--device", "cpu", "--quick", "--network", "gpt2"] + args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("bench_offload_exec: ") and says in err


def test_offload_exec_times_from_takes_the_files_times(tmp_path, capsys):
    """--times-from replaces the profiled stage times by the file's: the benchmark's store-all time (the
    sum of the chain's forward and backward times) is then the file's chain's, a seeded random chain
    with the quick GPT-2's L = 6 whose times (about 100 s a step) no CPU profile of that network gives."""
    import memplan
    from memplan.models.instance import save_instance

    src = memplan.random_chain(6, 3)
    path = save_instance(src, tmp_path / "times.json")
    assert _script("bench_offload_exec").main(["--device", "cpu", "--quick", "--network", "gpt2", "--times-from",
                                               str(path), "--fractions", "0.7", "--methods", "greedy",
                                               "--max-rounds", "4", "--out", str(tmp_path / "o.csv")]) == 0
    out = capsys.readouterr().out
    assert f"store-all {src.store_all_time() * 1e3:.1f} ms" in out.splitlines()[0]
