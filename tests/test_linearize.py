"""The linearization rule of models.graph on hand-built DAGs with known answers, and on zoo networks."""
import itertools
import random

import networkx as nx
import pytest

from memplan.models.graph import is_chain_partition, linearize


def _separators_by_definition(G):
    """Separators straight from the definition (module docstring of models.graph), O(V * (V + E))."""
    out = []
    for v in nx.topological_sort(G):
        anc, desc = nx.ancestors(G, v), nx.descendants(G, v)
        if len(anc) + len(desc) + 1 != len(G):
            continue
        if all(u == v for u, w in G.edges if (u in anc or u == v) and w in desc):
            out.append(v)
    return out


def test_straight_chain_gives_one_group_per_node():
    G = nx.DiGraph([("x", "a"), ("a", "b"), ("b", "c")])
    assert linearize(G) == [["a"], ["b"], ["c"]]


def test_residual_blocks():
    # conv-conv-add with identity skip, a relu, then a block with a projection shortcut, then fc
    G = nx.DiGraph([("x", "c1"), ("c1", "c2"), ("c2", "add"), ("x", "add"), ("add", "relu"),
                    ("relu", "d1"), ("d1", "d2"), ("d2", "add2"), ("relu", "proj"), ("proj", "add2"),
                    ("add2", "fc")])
    groups = linearize(G)
    assert [sorted(g) for g in groups] == [sorted(["c1", "c2", "add"]), ["relu"],
                                          sorted(["d1", "d2", "proj", "add2"]), ["fc"]]
    assert [g[-1] for g in groups] == ["add", "relu", "add2", "fc"]
    assert is_chain_partition(G, groups)


def test_dense_block_is_one_virtual_layer():
    # DenseNet block written with a list of features: layer i reads cat(x, y1..y_{i-1})
    G = nx.DiGraph()
    feats = ["x"]
    for i in range(1, 5):
        cat = f"cat{i}"
        for f in feats:
            G.add_edge(f, cat)
        G.add_edge(cat, f"bn{i}")
        G.add_edge(f"bn{i}", f"conv{i}")
        feats.append(f"conv{i}")
    for f in feats:
        G.add_edge(f, "cat_out")
    G.add_edge("cat_out", "trans_bn")
    G.add_edge("trans_bn", "trans_conv")
    groups = linearize(G)
    assert len(groups) == 3
    assert set(groups[0]) == set(G) - {"x", "trans_bn", "trans_conv"}
    assert groups[0][-1] == "cat_out"
    assert groups[1:] == [["trans_bn"], ["trans_conv"]]


def test_inception_module_is_one_virtual_layer():
    G = nx.DiGraph([("stem", "x"), ("x", "b1"), ("x", "b2a"), ("b2a", "b2b"), ("x", "b3a"), ("b3a", "b3b"),
                    ("b3b", "b3c"), ("x", "pool"), ("pool", "bp"),
                    ("b1", "cat"), ("b2b", "cat"), ("b3c", "cat"), ("bp", "cat"), ("cat", "next")])
    groups = linearize(G)
    assert groups[0] == ["x"]
    assert set(groups[1]) == {"b1", "b2a", "b2b", "b3a", "b3b", "b3c", "pool", "bp", "cat"}
    assert groups[1][-1] == "cat" and groups[2] == ["next"]


def test_nested_branch_inside_branch_and_size_node():
    # PipeDream's avgpool -> Size -> View with avgpool -> View: {Size, View} is one group
    G = nx.DiGraph([("x", "pool"), ("pool", "size"), ("pool", "view"), ("size", "view"), ("view", "fc")])
    assert linearize(G) == [["pool"], ["size", "view"], ["fc"]]


def test_long_skip_merges_everything_it_spans():
    G = nx.DiGraph([("x", "a"), ("a", "b"), ("b", "c"), ("c", "d"), ("a", "d"), ("d", "e")])
    assert linearize(G) == [["a"], ["b", "c", "d"], ["e"]]


def test_result_does_not_depend_on_the_topological_order_and_matches_the_definition():
    rng = random.Random(3)
    for trial in range(40):
        n = rng.randint(3, 12)
        G = nx.DiGraph()
        G.add_nodes_from(range(n))
        for v in range(1, n):
            G.add_edge(rng.randrange(v), v)            # every node reachable from 0
            for _ in range(rng.randint(0, 2)):
                G.add_edge(rng.randrange(v), v)
        for v in range(n - 1):                          # every node reaches n-1
            if G.out_degree(v) == 0:
                G.add_edge(v, rng.randrange(v + 1, n))
        base = linearize(G)
        assert is_chain_partition(G, base)
        assert [g[-1] for g in base] == _separators_by_definition(G)[1:]
        orders = list(itertools.islice(nx.all_topological_sorts(G), 30))
        for order in orders:
            other = linearize(G, order=order)
            assert [set(g) for g in other] == [set(g) for g in base]


def test_is_chain_partition_rejects_a_split_residual():
    G = nx.DiGraph([("x", "c1"), ("c1", "add"), ("x", "add"), ("add", "fc")])
    assert not is_chain_partition(G, [["c1"], ["add"], ["fc"]])
    assert is_chain_partition(G, [["c1", "add"], ["fc"]])


def test_needs_single_source_and_sink():
    with pytest.raises(ValueError, match="one source"):
        linearize(nx.DiGraph([("a", "c"), ("b", "c")]))
    with pytest.raises(ValueError, match="one sink"):
        linearize(nx.DiGraph([("a", "b"), ("a", "c")]))


# ------------------------------------------------------------------------------- zoo networks
torch = pytest.importorskip("torch")


@pytest.mark.parametrize("name,L", [("resnet18", 23), ("resnet50", 39), ("densenet121", 79),
                                    ("inception_v3", 32), ("vgg16", 40)])
def test_zoo_chain_lengths_on_meta_tensors(name, L):
    from memplan.models.graph import capture
    from memplan.models.networks import example_input, get_model

    with torch.device("meta"):
        m = get_model(name)
    shape = (3, 299, 299) if name == "inception_v3" else (3, 224, 224)
    x = example_input(name, 1, shape).to("meta")
    cap = capture(m, x)
    groups = cap.groups()
    assert len(groups) == L
    assert is_chain_partition(cap.graph, groups)


def test_stage_modules_compute_the_model_and_share_parameters():
    from memplan.models.graph import linearize_model
    from memplan.models.networks import example_input, get_model

    m = get_model("resnet18").eval()
    x = example_input("resnet18", 2, (3, 32, 32))
    lm = linearize_model(m, x)
    assert lm.L == 23 and lm.names[4] == "layer1.0"
    assert torch.equal(lm(x), m(x))
    ids = {id(p) for s in lm.stages for p in s.parameters()}
    assert ids == {id(p) for p in m.parameters()}


def test_gpt2_linearizes_to_two_stages_per_block():
    from memplan.models.graph import linearize_model
    from memplan.models.networks import example_input, get_model

    m = get_model("gpt2", n_layer=3, n_embd=32, n_head=4, vocab=50, n_ctx=16).eval()
    x = example_input("gpt2", 2, (8,), vocab=50)
    lm = linearize_model(m, x)
    # embedding sum, embedding dropout, (attention residual, MLP residual) per block, ln_f, head
    assert lm.L == 2 + 2 * 3 + 2
    assert torch.equal(lm(x), m(x))


def test_capture_leaves_batchnorm_statistics_and_rng_untouched():
    from memplan.models.graph import capture
    from memplan.models.networks import example_input, get_model

    m = get_model("resnet18").train()
    x = example_input("resnet18", 2, (3, 16, 16))
    before = {n: b.clone() for n, b in m.named_buffers()}
    rng = torch.get_rng_state()
    capture(m, x)
    assert all(torch.equal(b, before[n]) for n, b in m.named_buffers())
    assert torch.equal(torch.get_rng_state(), rng)
