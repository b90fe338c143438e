"""The linearization rule of models.graph on hand-built DAGs with known answers, and on zoo networks."""
import itertools
import random

import networkx as nx
import pytest

from memplan.models.graph import VIRTUAL_SINK, VIRTUAL_SOURCE, is_chain_partition, join_terminals, linearize


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


def test_cycle_and_bad_order_are_refused():
    with pytest.raises(ValueError, match="cycle"):
        linearize(nx.DiGraph([("a", "b"), ("b", "a"), ("x", "a")]))
    G = nx.DiGraph([("a", "c"), ("b", "c")])
    with pytest.raises(ValueError, match="topological order"):
        linearize(G, order=["c", "a", "b"])


def test_several_sources_join_through_a_virtual_source():
    # encoder-decoder: the target tokens enter at the decoder; both inputs travel in stage 1 up to the
    # cross-attention, then the decoder is a plain chain
    G = nx.DiGraph([("src", "enc1"), ("enc1", "enc2"), ("tgt", "emb"), ("emb", "xatt"), ("enc2", "xatt"),
                    ("xatt", "ff"), ("ff", "out")])
    H, s, t = join_terminals(G)
    assert s is VIRTUAL_SOURCE and t == "out" and set(H.successors(s)) == {"src", "tgt"}
    assert H.nodes[s] == {"virtual": True} and VIRTUAL_SOURCE not in G     # G is not modified
    groups = linearize(G)
    assert [set(g) for g in groups] == [{"src", "enc1", "enc2", "tgt", "emb", "xatt"}, {"ff"}, {"out"}]
    assert groups[0][-1] == "xatt"
    assert is_chain_partition(G, groups)
    assert not is_chain_partition(G, [["enc1", "enc2", "tgt", "emb", "xatt"], ["ff"], ["out"]])  # src lost
    assert not is_chain_partition(G, [["src", "enc1", "enc2"], ["tgt", "emb", "xatt"], ["ff"], ["out"]])


def test_several_sinks_join_through_a_virtual_sink():
    # auxiliary head branching at c1: its output must reach the loss, so everything after c1 is one group
    G = nx.DiGraph([("x", "c1"), ("c1", "aux1"), ("aux1", "aux2"), ("c1", "c2"), ("c2", "c3"), ("c3", "fc")])
    H, s, t = join_terminals(G)
    assert s == "x" and t is VIRTUAL_SINK and set(H.predecessors(t)) == {"aux2", "fc"}
    groups = linearize(G)
    assert groups[0] == ["c1"] and set(groups[1]) == {"aux1", "aux2", "c2", "c3", "fc"}
    assert all(VIRTUAL_SINK not in g for g in groups)
    assert is_chain_partition(G, groups)
    assert not is_chain_partition(G, [["c1"], ["aux1", "aux2", "c2"], ["c3", "fc"]])    # aux2 not in the last
    # a head at the very end (two classifiers on the same features) keeps the trunk's groups
    G2 = nx.DiGraph([("x", "a"), ("a", "b"), ("b", "head1"), ("b", "head2")])
    assert linearize(G2) == [["a"], ["b"], ["head1", "head2"]]


def _random_dag(rng, n, sources, sinks):
    """A random DAG on 0..n-1 meant to have about ``sources`` sources and ``sinks`` sinks (the test reads
    the actual ones from the graph)."""
    G = nx.DiGraph()
    G.add_nodes_from(range(n))
    for v in range(sources, n):
        for _ in range(rng.randint(1, 3)):
            G.add_edge(rng.randrange(v), v)
    for v in range(n - sinks):
        if G.out_degree(v) == 0:
            G.add_edge(v, rng.randrange(max(v + 1, sources), n - sinks) if v + 1 < n - sinks else rng.randrange(n - sinks, n))
    for v in range(n - sinks, n):
        for u in list(G.successors(v)):
            G.remove_edge(v, u)
    return G


def test_random_multi_terminal_dags_match_the_definition_on_the_joined_graph():
    rng = random.Random(18)
    checked = 0
    for trial in range(120):
        k_in, k_out = rng.randint(1, 3), rng.randint(1, 3)
        n = rng.randint(k_in + k_out + 1, 12)
        G = _random_dag(rng, n, k_in, k_out)
        srcs = [v for v in G if G.in_degree(v) == 0]
        snks = [v for v in G if G.out_degree(v) == 0]
        if set(srcs) & set(snks):
            continue
        checked += 1
        groups = linearize(G)
        assert is_chain_partition(G, groups)
        H, s, t = join_terminals(G)
        # separators by the definition, on the joined graph; the virtual sink closes the last group
        seps = _separators_by_definition(H)
        assert seps[0] == s and seps[-1] == t
        assert [g[-1] for g in groups[:-1]] == seps[1:-1]
        if len(snks) > 1:
            assert set(snks) <= set(groups[-1])
        else:
            assert groups[-1][-1] == t
        if len(srcs) > 1:
            assert set(srcs) <= set(groups[0])
        covered = [v for g in groups for v in g]
        assert len(covered) == len(set(covered)) and set(covered) == set(G) - ({s} if s in G else set())
        for order in itertools.islice(nx.all_topological_sorts(G), 10):
            assert [set(g) for g in linearize(G, order=order)] == [set(g) for g in groups]
    assert checked >= 60


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
    lm = linearize_model(m, x, cuts="minimal")
    assert lm.L == 23 and lm.names[4] == "layer1.0" and lm.head is None
    assert torch.equal(lm(x), m(x))
    ids = {id(p) for s in lm.stages for p in s.parameters()}
    assert ids == {id(p) for p in m.parameters()}


def test_saved_cuts_resnet18_by_hand():
    """Where autograd keeps the boundary: conv1's output (batch norm saves its input), the stem's
    ReLU output (the ReLU saves its output), each block's last ReLU, the flattened pooled features
    (the linear layer saves its input). Not kept: bn1's output (the ReLU saves only its own output),
    each residual sum (addition saves nothing, the ReLU after it its output), the logits (the
    cross-entropy saves its log-softmax, not its input): those cuts go, and fc is folded into the loss.
    Nor the pooled features before the flatten, although the linear layer saves their storage: the
    flatten is a view of them, a stage of its own would return its input's storage (the model would
    count it twice), so pooling and flatten are one stage."""
    from memplan.models.graph import linearize_model
    from memplan.models.networks import example_input, get_model

    m = get_model("resnet18").train()
    x = example_input("resnet18", 2, (3, 32, 32))
    lm = linearize_model(m, x)
    blocks = [f"layer{i}.{j}" for i in range(1, 5) for j in range(2)]
    assert [g[-1] for g in lm.groups[:3]] == ["conv1", "relu", "maxpool"]
    assert lm.groups[1] == ["bn1", "relu"]
    assert lm.names[3:11] == blocks and lm.L == 3 + 8 + 1
    assert lm.groups[-1] == ["avgpool", "flatten"]
    assert all(g[-2].startswith("add") for g in lm.groups[3:11])        # sum and ReLU in one stage
    assert lm.head_group == ["fc"] and lm.loss_name == "fc+loss"
    minimal = linearize_model(m, x, cuts="minimal").groups
    assert [n for g in lm.groups + [lm.head_group] for n in g] == [n for g in minimal for n in g]
    m.eval()
    assert torch.equal(lm(x), m(x))
    ids = {id(p) for s in lm.stages + [lm.head] for p in s.parameters()}
    assert ids == {id(p) for p in m.parameters()}


@pytest.mark.parametrize("name,kw,shape", [("resnet18", {}, (3, 32, 32)),
                                           ("gpt2", dict(n_layer=2, n_embd=32, n_head=4, vocab=50, n_ctx=16), (8,)),
                                           pytest.param("densenet121", {}, (3, 32, 32), marks=pytest.mark.long)])
def test_every_saved_cut_is_a_tensor_autograd_keeps(name, kw, shape):
    """A second method: run stages l..l+3 from a^{l-1} with saved-tensor hooks and check that one of
    them saves the storage of a^l (stage l+1 mostly); and that each merged-away cut of the minimal
    groups is saved by none of those, or is the storage of the next minimal cut too (the pooled
    features and their flattened view, which the linear layer saves: a stage that returns its input's
    storage is merged into). (Only a view can carry a^l's storage past stage l+1, and the zoo's views
    are one stage long: three stages of look-ahead keep the check linear in L.)"""
    from memplan.models.graph import linearize_model
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss, saved_storages, storage_bytes

    torch.manual_seed(0)
    m = get_model(name, **kw).train()
    x = example_input(name, 2, shape, vocab=50)
    loss = classification_loss()

    def boundaries_saved(stages, aliased=None):
        acts = [x]
        with torch.no_grad():
            for s in stages:
                acts.append(s(acts[-1]))
        if aliased is not None:     # a^l's storage is a^{l+1}'s
            aliased.extend(acts[l].untyped_storage().data_ptr() == acts[l + 1].untyped_storage().data_ptr()
                           for l in range(1, len(stages)))
        result = []
        for l in range(1, len(stages)):
            xi = acts[l - 1].detach().requires_grad_(acts[l - 1].is_floating_point())

            def rest():
                y = stages[l - 1](xi)
                z = y
                for s in stages[l:l + 3]:
                    z = s(z)
                return z, y

            (_, y), seen = saved_storages(rest)
            result.append(y.untyped_storage().data_ptr() in seen)
        return result

    lm = linearize_model(m, x, loss)
    stages = lm.stages + [lm.loss_stage(loss)]
    assert all(boundaries_saved(stages)), name
    fine = linearize_model(m, x, loss, cuts="minimal")
    kept = {g[-1] for g in lm.groups}
    aliased: list[bool] = []
    fine_saved = boundaries_saved(fine.stages + [loss], aliased)
    for g, saved, alias in zip(fine.groups, fine_saved, aliased):
        assert (saved and not alias) == (g[-1] in kept), (name, g[-1])
    if name == "resnet18":
        assert sum(aliased) == 1           # avgpool, whose flatten is a view
    assert storage_bytes(x) > 0


def test_gpt2_linearizes_to_two_stages_per_block():
    from memplan.models.graph import linearize_model
    from memplan.models.networks import example_input, get_model

    m = get_model("gpt2", n_layer=3, n_embd=32, n_head=4, vocab=50, n_ctx=16).eval()
    x = example_input("gpt2", 2, (8,), vocab=50)
    lm = linearize_model(m, x, cuts="minimal")
    # embedding sum, embedding dropout, (attention residual, MLP residual) per block, ln_f, head
    assert lm.L == 2 + 2 * 3 + 2
    assert torch.equal(lm(x), m(x))
    # keeping only cuts autograd saves: the embedding sum (dropout saves its mask, not its input) joins
    # the dropout (in training mode), and the head (the logits are read by the loss only) is folded
    # into the loss
    lm = linearize_model(m.train(), x)
    assert lm.L == 1 + 2 * 3 + 1 and lm.head_group == ["lm_head"]
    m.eval()
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


@pytest.mark.parametrize("name, kw, shape", [("resnet18", {}, (3, 32, 32)),
                                            ("gpt2", dict(n_layer=2, n_embd=32, n_head=2, n_ctx=16, vocab=64), (16,))])
def test_stage_modules_reach_the_models_own_modules_by_one_lookup(name, kw, shape):
    """The stages' generated code calls each module by a flat attribute (``self.layer1_0_conv1``), not
    a chain of lookups, and those attributes are the traced model's own modules: every stage
    parameter is one of the model's (the same object), and the stages run one after the other give
    the model's output."""
    import torch

    from memplan.models.graph import linearize_model
    from memplan.models.networks import example_input, get_model

    torch.manual_seed(0)
    model = get_model(name, **kw).train()
    x = example_input(name, 2, shape, **({"vocab": kw["vocab"]} if "vocab" in kw else {}))
    lm = linearize_model(model, x)
    own = {id(p) for p in model.parameters()}
    modules = {id(m) for m in model.modules()}
    for st in lm.stages:
        for n in st.graph.nodes:
            if n.op in ("call_module", "get_attr"):
                assert "." not in n.target, (n.target, "a chain of lookups")
                if n.op == "call_module":
                    assert id(getattr(st, n.target)) in modules
        assert all(id(p) in own for p in st.parameters())
        assert "getattr(self." not in st.code
    model.eval()
    lm_stages = [s.eval() for s in lm.stages]
    with torch.no_grad():
        h = x
        for s in lm_stages:
            h = s(h)
            h = h[0] if isinstance(h, tuple) else h
        ref = model(x)
    assert torch.equal(h if lm.head is None else lm.head(h), ref)


def test_a_stage_returning_its_input_is_merged_into():
    """GPT-2 with dropout 0: the embedding's dropout returns its input tensor in training, so the cut
    before it and the cut after it are one storage, which the block's layer norm saves. As a stage of
    its own it made the model count that storage twice (a^1 and abar^2) where the executor holds it
    once: the store-all replay was one activation (32 KB of 2 MB) above the measured peak. Merged into
    the embedding's stage, the chain is the one of GPT-2 with dropout, and the replay is the measured
    peak to the byte."""
    from memplan.baselines.remat_heuristics import store_all_schedule
    from memplan.models.graph import linearize_model
    from memplan.models.memory import step_peak
    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss, profile_chain
    from memplan.models.remat import simulate_remat
    from memplan.models.runtime import execute

    kw = dict(n_layer=2, n_embd=64, n_head=2, n_ctx=64, vocab=512)
    x = example_input("gpt2", 2, (64,), vocab=512)
    loss = classification_loss()
    torch.manual_seed(0)
    m = get_model("gpt2", **kw, dropout=0.0).train()
    lm = linearize_model(m, x, loss)
    with_dropout = linearize_model(get_model("gpt2", **kw, dropout=0.1).train(), x, loss)
    assert lm.names == with_dropout.names and lm.names[0] == "embed" and lm.L == 6
    assert lm.groups[0][-2:] == ["add", "embed_drop"] == with_dropout.groups[0][-2:]
    stages, ls = lm.stages, lm.loss_stage(loss)
    chain = profile_chain(stages, x, ls, repeats=1, names=lm.names)
    seq = store_all_schedule(chain)
    peak = step_peak(lambda: execute(stages, ls, x, seq), list(m.parameters()), "cpu")
    assert peak == simulate_remat(chain, seq).peak_memory


def _merge_by_brute_force(groups, saved, storages):
    """merge_unsaved_cuts' rule as conditions on the set K of kept cuts (the cut after group l, l < n-1),
    checked on every subset: each kept cut is saved; two consecutive kept cuts (and the last kept cut
    and the last group's separator, where that group is not folded into the loss: saved) have other
    storages; each cut left out is unsaved or has the storage of the next kept cut (or of that last
    separator). Exactly one K satisfies them; returns its groups and head."""
    n = len(groups)
    last = groups[-1][-1]
    found = []
    for K in itertools.product((False, True), repeat=n - 1):
        def next_storage(l):
            m = next((m for m in range(l + 1, n - 1) if K[m]), None)
            if m is not None:
                return storages[groups[m][-1]]
            return storages[last] if last in saved else None
        ok = True
        for l in range(n - 1):
            sep = groups[l][-1]
            if K[l]:
                ok &= sep in saved and storages[sep] != next_storage(l)
            else:
                ok &= sep not in saved or storages[sep] == next_storage(l)
        if ok:
            found.append(K)
    assert len(found) == 1, found
    out, cur = [], []
    for l, g in enumerate(groups):
        cur = cur + list(g)
        if l == n - 1 or found[0][l]:
            out.append(cur)
            cur = []
    head = out.pop() if len(out) > 1 and out[-1][-1] not in saved else []
    return out, head


def test_merging_cuts_on_random_groups():
    """merge_unsaved_cuts with storages on random chains of groups (hypothesis): the nodes stay in
    order; every kept cut is saved and does not share its storage with the next stage's output; the
    answer is the one set of cuts that satisfies the rule's conditions (_merge_by_brute_force, every
    subset tried); without storages, the saved-cut rule alone."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from memplan.models.graph import merge_unsaved_cuts

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.tuples(st.integers(1, 3), st.booleans(), st.integers(0, 3)), min_size=1, max_size=9))
    def check(spec):
        groups, saved, storages, k = [], set(), {}, 0
        for size, is_saved, storage in spec:
            g = [f"n{k + i}" for i in range(size)]
            k += size
            groups.append(g)
            if is_saved:
                saved.add(g[-1])
            storages[g[-1]] = storage
        out, head = merge_unsaved_cuts(groups, saved, storages)
        assert [v for g in out + [head] for v in g] == [v for g in groups for v in g]
        assert (out, head) == _merge_by_brute_force(groups, saved, storages)
        # between two stages: a saved tensor that is not the next stage's output storage; before a
        # folded head (the loss stage's input): a saved tensor
        for g, h in zip(out, out[1:]):
            assert g[-1] in saved and storages[g[-1]] != storages[h[-1]]
        assert not head or out[-1][-1] in saved
        # without storages: the saved-cut rule alone (every storage its own)
        assert merge_unsaved_cuts(groups, saved) == _merge_by_brute_force(groups, saved,
                                                                          {g[-1]: i for i, g in enumerate(groups)})

    check()


# ------------------------------------------------ models that return their tensor inside a structure
class _Out(__import__("collections").namedtuple("_Out", "logits aux")):
    pass


def _structured_mlp(kind):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Tanh())
                                              for _ in range(4)])
            self.fc = torch.nn.Linear(32, 5)

        def forward(self, x):
            t = self.fc(self.body(x))
            return {"dict": lambda: {"logits": t, "layers": 4}, "tuple": lambda: (t, None),
                    "namedtuple": lambda: _Out(t, 7), "list": lambda: [t]}[kind]()
    return M()


def _logits(out):
    return out["logits"] if isinstance(out, dict) else out.logits if isinstance(out, _Out) else out[0]


@pytest.mark.parametrize("kind", ["dict", "tuple", "namedtuple", "list"])
def test_a_model_returning_its_tensor_in_a_structure_is_cut_and_trains_as_autograd(kind):
    """A model written for a training loop returns ``{"logits": t, ...}`` or ``(t, None)``: the chain ends
    in ``t``, the user's loss gets the structure back, and the executed plans (store-all, and one
    recomputing every stage) give autograd's gradients on the model itself, bit for bit."""
    from memplan.models.graph import linearize_model
    from memplan.models.remat import store_all_ops, turn_ops
    from memplan.models.runtime import execute

    torch.manual_seed(0)
    m = _structured_mlp(kind)
    x, y = torch.randn(8, 32), torch.randint(0, 5, (8,))
    seen = []

    def loss(out):
        seen.append(type(out))
        return torch.nn.functional.cross_entropy(_logits(out), y)

    lm = linearize_model(m, x, loss)
    assert lm.L >= 4 and lm.captured.output is not None and lm.captured.output.kind == kind.replace("namedtuple", "_Out")
    got, want = lm(x), m(x)
    assert type(got) is type(want) and torch.equal(_logits(got), _logits(want))
    if kind == "dict":
        assert got["layers"] == 4
    loss(m(x)).backward()
    ref = [p.grad.clone() for p in m.parameters()]
    for ops in (store_all_ops(lm.L), turn_ops(lm.L)):
        m.zero_grad(set_to_none=True)
        seen.clear()
        r = execute(lm.stages, lm.loss_stage(loss), x, ops)
        assert seen and all(t is type(want) for t in seen)          # the loss saw the model's structure
        assert r.loss == pytest.approx(float(loss(m(x)).detach()), rel=1e-6)
        assert all(torch.equal(p.grad, g) for p, g in zip(m.parameters(), ref))


def test_a_model_returning_two_tensors_is_refused_with_the_count():
    from memplan.models.graph import linearize_model

    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 3)

        def forward(self, x):
            h = self.a(x)
            return {"logits": self.b(h), "hidden": h}

    with pytest.raises(ValueError, match=r"returns 2 tensors \(in a dict\).*return only it"):
        linearize_model(Two(), torch.randn(4, 8))


def test_a_structured_output_refuses_a_chunked_loss_stage():
    from memplan.models.graph import linearize_model

    m = _structured_mlp("dict")
    x = torch.randn(8, 32)
    y = torch.zeros(8, dtype=torch.long)
    lm = linearize_model(m, x, lambda o: torch.nn.functional.cross_entropy(o["logits"], y))
    assert lm.head is not None                     # the classifier is folded into the loss stage
    with pytest.raises(ValueError, match="in a dict: a loss over chunks of tokens takes the logits tensor"):
        lm.loss_stage(lambda o: o["logits"].sum(), chunks=2, targets=lambda: ())


class _Masked(torch.nn.Module):
    """Reads a mask beside its input; ``scale`` and ``bias_off`` have defaults (``scale=None`` traced as a
    proxy would take the scaled branch)."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(16, 16) for _ in range(4)])
        self.out = torch.nn.Linear(16, 3)

    def forward(self, x, mask, scale=None, bias_off: bool = False):
        h = x
        for lin in self.layers:
            h = torch.tanh(lin(h)).masked_fill(mask, 0.0)
            if scale is not None:
                h = h * scale
        return self.out(h)


def test_a_model_with_a_mask_input_is_cut_and_each_step_reads_its_own_mask():
    """The inputs after the first are read inside the stages (``context``), the defaults of the others
    are kept: the chain computes the model, and a step with another mask trains as autograd on it."""
    from memplan.models.graph import linearize_model
    from memplan.models.remat import turn_ops
    from memplan.models.runtime import execute

    torch.manual_seed(0)
    m = _Masked()
    x, y = torch.randn(6, 16), torch.randint(0, 3, (6,))
    masks = [torch.rand(6, 16) > 0.7, torch.rand(6, 16) > 0.3]

    def loss(out):
        return torch.nn.functional.cross_entropy(out, y)

    lm = linearize_model(m, x, loss, context=(masks[0],))
    assert lm.L >= 4 and torch.equal(lm(x), m(x, masks[0]))
    for mask in masks:
        m.zero_grad(set_to_none=True)
        loss(m(x, mask)).backward()
        ref = [p.grad.clone() for p in m.parameters()]
        m.zero_grad(set_to_none=True)
        lm.captured.context.values = (mask,)
        execute(lm.stages, lm.loss_stage(loss), x, turn_ops(lm.L))      # every stage recomputed
        assert all(torch.equal(p.grad, g) for p, g in zip(m.parameters(), ref))
    assert not torch.equal(masks[0], masks[1])


def test_a_model_input_without_a_default_must_be_given():
    from memplan.models.graph import linearize_model

    with pytest.raises(ValueError, match="forward takes 4 inputs and 1 were given: give mask too"):
        linearize_model(_Masked(), torch.randn(6, 16))


class _Gated(torch.nn.Module):
    """A gate computed inside ``torch.no_grad()`` (a stop-gradient branch, as a target network's)."""

    def __init__(self):
        super().__init__()
        self.a, self.gate, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.a(x))
        with torch.no_grad():
            g = torch.sigmoid(self.gate(h))
        return self.b(h * g)


def test_a_no_grad_block_inside_the_model_stays_without_gradients():
    """fx records no grad mode: the block's operations ran with autograd in the stages, so the gate's
    weights got gradients eager leaves at None and ``a``'s gradients took the extra path through the
    gate (silently other gradients than the model's). Now a value leaving the block is detached: the
    executed plans give eager's gradients bit for bit, None where eager has None."""
    from memplan.models.graph import linearize_model
    from memplan.models.remat import store_all_ops, turn_ops
    from memplan.models.runtime import execute

    torch.manual_seed(0)
    m = _Gated()
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))

    def loss(out):
        return torch.nn.functional.cross_entropy(out, y)

    loss(m(x)).backward()
    ref = {n: p.grad for n, p in m.named_parameters()}
    assert ref["gate.weight"] is None and ref["a.weight"] is not None
    lm = linearize_model(m, x, loss)
    for ops in (store_all_ops(lm.L), turn_ops(lm.L)):
        m.zero_grad(set_to_none=True)
        execute(lm.stages, lm.loss_stage(loss), x, ops, input_grad=False)
        for n, p in m.named_parameters():
            assert (p.grad is None) == (ref[n] is None), n
            assert p.grad is None or torch.equal(p.grad, ref[n]), n


def test_a_model_switching_autocast_inside_is_refused_with_the_node():
    """fx records no autocast state either: a softmax the model keeps in float32 under an outer bfloat16
    autocast would run in bfloat16 in the stages. Refused, naming the first node of the block."""
    from memplan.models.graph import linearize_model

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 8)

        def forward(self, x):
            h = self.a(x)
            with torch.autocast("cpu", enabled=False):
                return torch.softmax(h.float(), -1)

    with torch.autocast("cpu", dtype=torch.bfloat16):
        with pytest.raises(ValueError, match=r"switches torch.autocast inside its forward \(at node float"):
            linearize_model(M(), torch.randn(2, 8))
    assert linearize_model(M(), torch.randn(2, 8)).L >= 1        # without an outer autocast nothing switches
