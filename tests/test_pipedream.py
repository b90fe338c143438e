"""The PipeDream graph.txt importer, checked against sums read by hand from the published profiles."""
import json
import re
from pathlib import Path

import pytest

from memplan.models.graph import is_chain_partition
from memplan.models.pipedream import PipeDreamFormatError, import_graph, read_graph

ROOT = Path(__file__).resolve().parents[1]
PD = ROOT.parent / "shared" / "external" / "pipedream"
if not (PD / "resnet18.graph.txt").exists():
    PD = Path("/work/shared/external/pipedream")
pytestmark = pytest.mark.skipif(not (PD / "resnet18.graph.txt").exists(), reason="PipeDream profiles not available")
MB = 205520896.0  # 128 x 64 x 56 x 56 x 4 bytes


def test_read_graph_resnet18():
    G = read_graph(PD / "resnet18.graph.txt")
    assert G.number_of_nodes() == 71 and G.number_of_edges() == 79
    n2 = G.nodes["node2"]
    assert n2["type"] == "Conv2d"
    assert n2["uf"] == pytest.approx(23.046e-3) and n2["ub"] == pytest.approx(9.284e-3)
    assert n2["out_bytes"] == 822083584.0 and n2["weight_bytes"] == 37632.0


def test_import_resnet18_values_by_hand():
    c = import_graph(PD / "resnet18.graph.txt")
    G = read_graph(PD / "resnet18.graph.txt")
    assert c.L == 23
    assert is_chain_partition(G, c.provenance["groups"])
    assert c.wa[0] == 154140672.0                        # Input: 128 x 3 x 224 x 224 x 4
    assert c.uf[1] == pytest.approx(23.046e-3)           # conv1 alone
    # stage 5 = first basic block, node6..node11 (conv, bn, relu, conv, bn, add)
    assert sorted(c.provenance["groups"][4]) == sorted(f"node{i}" for i in range(6, 12))
    assert c.uf[5] == pytest.approx((4.417 + 1.083 + 0.751 + 4.337 + 1.042 + 0.0) * 1e-3)
    assert c.ub[5] == pytest.approx((9.775 + 1.196 + 0.757 + 9.971 + 1.192 + 0.0) * 1e-3)
    assert c.weights[5] == 2 * 147456 + 2 * 512
    assert c.wa[5] == MB and c.wabar[5] == 6 * MB and c.wd[5] == MB
    # avgpool -> Size -> View: one group {Size, View} whose output is the view (128 x 512 x 4 bytes)
    assert c.provenance["groups"][21] == ["node69", "node70"]
    assert c.wa[22] == 524288.0 and c.wabar[22] == 524288.0 + 4.0
    # totals: all forward/backward times but the Input's; weights = ResNet-18's 11,689,512 fp32 parameters
    total = sum(G.nodes[n]["uf"] + G.nodes[n]["ub"] for n in G if G.nodes[n]["type"] != "Input")
    assert c.store_all_time() == pytest.approx(total)
    assert c.total_weights() == 4 * 11_689_512
    assert c.uf[c.L + 1] == 0 and c.wa[c.L + 1] == 0


def test_batch_rescaling_is_linear_in_times_and_activations_only():
    full = import_graph(PD / "resnet50.graph.txt")
    small = import_graph(PD / "resnet50.graph.txt", batch=32)
    assert small.L == full.L == 39
    assert small.uf[1:] == pytest.approx(full.uf[1:] / 4)
    assert small.wabar == pytest.approx(full.wabar / 4)
    assert small.wa[0] == 32 * 3 * 224 * 224 * 4
    assert (small.weights == full.weights).all()
    assert full.total_weights() == 4 * 25_557_032      # ResNet-50's parameter count
    assert "32/128" in small.provenance["scaling"] and "scaling" not in full.provenance


@pytest.mark.parametrize("name,L", [("alexnet", 21), ("vgg16", 39), ("densenet121", 77)])
def test_other_profiles_import(name, L):
    c = import_graph(PD / f"{name}.graph.txt", batch=16)
    assert c.L == L
    assert all(c.wabar[1:c.L + 1] >= c.wa[1:c.L + 1])


def test_cli_import_writes_a_loadable_instance(tmp_path):
    from memplan.experiments.cli import main
    from memplan.models.instance import load_chain

    out = tmp_path / "pd.json"
    assert main(["import-pipedream", str(PD / "resnet18.graph.txt"), "--batch", "32", "-o", str(out)]) == 0
    c = load_chain(out)
    ref = import_graph(PD / "resnet18.graph.txt", batch=32)
    assert c.L == ref.L
    assert c.wabar == pytest.approx(ref.wabar, rel=1e-12, abs=1e-3)
    assert c.uf == pytest.approx(ref.uf, rel=1e-9)
    data = json.loads(out.read_text())
    assert data["provenance"]["source"].endswith("resnet18.graph.txt") and data["provenance"]["batch"] == 32
    assert main(["import-pipedream", str(PD / "resnet18.graph.txt"), "-o", str(out)]) == 2   # no overwrite


def test_bad_line_names_file_and_line(tmp_path):
    bad = tmp_path / "graph.txt"
    bad.write_text("node1 -- Input -- forward_compute_time=1.0, backward_compute_time=0.0, activation_size=4.0, "
                   "parameter_size=0.0\nthis is not a node\n")
    with pytest.raises(PipeDreamFormatError, match=r"graph.txt:2"):
        read_graph(bad)


@pytest.mark.long
def test_ilp_is_never_slower_than_a_baseline_eager_schedule():
    """PipeDream's ResNet-18 (batch 8) on 8 GPUs at 534 MiB per GPU, 12 GB/s: PipeDream's best point is
    an eager 1F1B run of 5 stages whose steady state is not 1-periodic (period 9.172 ms), faster than
    the 1-periodic patterns the ILP finds in its time (9.266 ms after 60 s, proven bound 3.65 ms). The
    method ilp then returns that schedule, with the bound valid for every schedule and what the ILP
    found among patterns in details['ilp']; it is never slower than the pipedream or gpipe answer."""
    import memplan
    from memplan.experiments.sweep_engine import Source
    from memplan.models.pipeline import EagerResult, period_lower_bound, task_data

    chain, _ = Source(str(PD / "resnet18.graph.txt"), 8).load()
    M, kw = 5.59608e8, dict(bandwidth=12e9, gpus=8, threads=1)
    pts = memplan.pipeline.baseline_points(chain, **{k: kw[k] for k in ("bandwidth", "gpus")})
    base = [memplan.pipeline.solve(chain, memory=M, method=m, points=pts, **kw) for m in ("pipedream", "gpipe")]
    ilp = memplan.pipeline.solve(chain, memory=M, method="ilp", points=pts, time_limit=4, **kw)
    best = min(b.objective for b in base)
    assert base[0].objective == best and base[0].schedule.pattern is None    # eager, not 1-periodic
    assert ilp.objective <= best * (1 + 1e-12) and ilp.peak_memory <= M
    # the patterns found in 4 s lose (60 s find 9.266 ms): the answer is the baseline's schedule
    assert isinstance(ilp.schedule, EagerResult) and ilp.objective == pytest.approx(best)
    assert ilp.details["ilp"]["period"] is None or ilp.details["ilp"]["period"] > ilp.objective
    assert ilp.bound == pytest.approx(period_lower_bound(task_data(chain, 12e9, "autograd"), 8))
    assert str(ilp.status) in ("feasible", "time_limit") and "eager" in ilp.message


@pytest.mark.parametrize("field,value", [("forward_compute_time", "-1.042"), ("backward_compute_time", "inf"),
                                         ("activation_size", "nan"), ("activation_size", "[4.0; -2.0]"),
                                         ("parameter_size", "-512.000")])
def test_a_value_that_is_not_a_time_or_size_names_file_node_and_field(field, value, tmp_path, capsys):
    """A negative, NaN or infinite time or size (one entry of a list included) is refused by the importer
    with the file, line, node and field, not taken as it is (a negative time went through) or refused
    later by the chain without them (``Chain.uf[5] = nan is out of range``)."""
    from memplan.experiments.cli import main

    lines = (PD / "resnet18.graph.txt").read_text().splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("node10 -- "))
    lines[k] = re.sub(rf"{field}=[^,]+(?=,|$)", f"{field}={value}", lines[k])
    assert f"{field}={value}" in lines[k]
    bad = tmp_path / "bad.graph.txt"
    bad.write_text("\n".join(lines) + "\n")
    assert main(["import-pipedream", str(bad), "-o", str(tmp_path / "out.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"bad.graph.txt:{k + 1}: node node10: {field}={value} is not a " in err
    assert not (tmp_path / "out.json").exists()
