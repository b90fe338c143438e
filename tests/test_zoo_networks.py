"""The network zoo: parameter counts of the published architectures, shapes, and the registry."""
import pytest

nx = pytest.importorskip("networkx")
torch = pytest.importorskip("torch")

from memplan.models.networks import MODELS, count_parameters, example_input, get_model  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# the parameter counts usually quoted for these architectures (1000 classes; GPT-2 small, tied head)
COUNTS = {
    "resnet18": 11_689_512, "resnet34": 21_797_672, "resnet50": 25_557_032, "resnet101": 44_549_160,
    "resnet152": 60_192_808, "densenet121": 7_978_856, "densenet161": 28_681_000,
    "densenet169": 14_149_480, "densenet201": 20_013_928, "inception_v3": 23_834_568,
    "vgg16": 138_357_544, "vgg19": 143_667_240, "gpt2": 124_439_808,
}


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_parameter_counts(name):
    with torch.device("meta"):
        m = get_model(name)
    assert count_parameters(m) == COUNTS[name]


def test_inception_aux_head_and_preact_nets():
    with torch.device("meta"):
        assert count_parameters(get_model("inception_v3", aux_logits=True)) == 27_161_264
        p1001 = get_model("preact_resnet1001")
        p200 = get_model("preact_resnet200")
    # 1001 = 9 * 111 + 2: three stages of 111 bottleneck blocks (3 convolutions each) + stem conv + fc
    blocks = [m for m in p1001.modules() if type(m).__name__ == "PreActBottleneck"]
    assert len(blocks) == 333
    assert len([m for m in p200.modules() if type(m).__name__ == "PreActBottleneck"]) == 3 + 24 + 36 + 3
    assert 10.2e6 < count_parameters(p1001) < 10.4e6        # "10.2M" in the identity-mappings paper


@pytest.mark.parametrize("name,shape", [("resnet18", (3, 32, 32)), ("densenet121", (3, 32, 32)),
                                        ("inception_v3", (3, 75, 75))])
def test_forward_shapes_on_meta(name, shape):
    with torch.device("meta"):
        m = get_model(name)
    y = m(example_input(name, 2, shape).to("meta"))
    assert tuple(y.shape) == (2, 1000)


def test_gpt2_configurable_and_causal():
    m = get_model("gpt2", n_layer=2, n_embd=32, n_head=4, vocab=40, n_ctx=16, dropout=0.0).eval()
    x = example_input("gpt2", 2, (10,), vocab=40)
    y = m(x)
    assert y.shape == (2, 10, 40)
    x2 = x.clone()
    x2[:, 7:] = (x2[:, 7:] + 1) % 40          # changing later tokens leaves earlier logits unchanged
    assert torch.equal(m(x2)[:, :7], y[:, :7])
    assert m.lm_head.weight is m.embed.wte.weight
    assert count_parameters(m) == sum(p.numel() for p in m.parameters())


def test_registry():
    assert len(MODELS) == 19
    with pytest.raises(KeyError, match="unknown model"):
        get_model("resnet19")
    assert get_model("ResNet-18").fc.out_features == 1000
    assert example_input("gpt2", 3, (5,)).dtype == torch.int64


# ---------------------------------------------------------------- multi-branch networks (issue 30)
def _sep(k, c):       # NASNet sepK on c channels: twice (depthwise k x k, pointwise 1x1, BN)
    return 2 * (c * k * k + c * c + 2 * c)


def _rcb(ci, co):     # ReLU - 1x1 conv (no bias) - BN
    return ci * co + 2 * co


def test_nasnet_parameters_by_hand():
    # channels C=4, one normal cell per stack: stem 3->12; normal(4), reduction(8), normal(8),
    # reduction(16), normal(16); a normal cell has 3 sep3 + 2 sep5 and outputs 6C, a reduction cell
    # sep3 + 2 sep5 + 2 sep7 and outputs 4C; after a reduction h_{i-2} goes through a factorized
    # reduction (two 1x1 convs giving half of the channels each, then BN: ci*co + 2co, like _rcb)
    normal = lambda c: 3 * _sep(3, c) + 2 * _sep(5, c)            # noqa: E731
    reduction = lambda c: _sep(3, c) + 2 * _sep(5, c) + 2 * _sep(7, c)   # noqa: E731
    stem = 3 * 12 * 9 + 2 * 12
    cells = [_rcb(12, 4) + _rcb(12, 4) + normal(4),              # reads stem, stem -> 24 channels
             _rcb(12, 8) + _rcb(24, 8) + reduction(8),           # reads stem, cell0 -> 32
             _rcb(24, 8) + _rcb(32, 8) + normal(8),              # factorized reduce of cell0 -> 48
             _rcb(32, 16) + _rcb(48, 16) + reduction(16),        # -> 64
             _rcb(48, 16) + _rcb(64, 16) + normal(16)]           # -> 96
    m = get_model("nasnet_a", channels=4, cells=1, num_classes=10)
    assert count_parameters(m) == stem + sum(cells) + 96 * 10 + 10 == 24_878
    assert len(m.cells) == 5 and [c.reduction for c in m.cells] == [False, True, False, True, False]


def test_unet_parameters_by_hand():
    # base 4, depth 2, 3 -> 2 classes: double convs (3x3, no bias, BN) 3->4, 4->8, bottleneck 8->16;
    # up 16->8 and 8->4 (2x2 transposed, with bias); decoder double convs 16->8, 8->4; 1x1 head 4->2
    dc = lambda ci, co: ci * co * 9 + 2 * co + co * co * 9 + 2 * co      # noqa: E731
    expected = (dc(3, 4) + dc(4, 8) + dc(8, 16) + (16 * 8 * 4 + 8) + dc(16, 8) + (8 * 4 * 4 + 4) + dc(8, 4)
                + 4 * 2 + 2)
    assert count_parameters(get_model("unet", base=4, depth=2)) == expected == 7554
    with torch.device("meta"):   # the paper's widths (base 64, depth 4): the encoder's last level has 512 channels
        m = get_model("unet")
    assert m.bottleneck.ops[0].in_channels == 512 and m.bottleneck.ops[0].out_channels == 1024


def test_transformer_parameters_by_hand():
    V, d, ff = 11, 8, 16
    attn = 4 * (d * d + d)                      # q, k, v, o projections with bias
    ffn = d * ff + ff + ff * d + d
    enc = attn + ffn + 2 * 2 * d                # two LayerNorms
    dec = 2 * attn + ffn + 3 * 2 * d            # self- and cross-attention, three LayerNorms
    m = get_model("transformer", vocab=V, d_model=d, n_head=2, d_ff=ff, n_enc=1, n_dec=1, src_len=3, n_ctx=8)
    assert count_parameters(m) == V * d + enc + dec == 1592     # embedding shared with the output projection
    assert m.out.weight is m.tok.weight


def test_llama_parameters_by_hand_swiglu_and_causal():
    V, d, h, n = 13, 16, 48, 2
    per_block = 4 * d * d + 3 * d * h + 2 * d          # q, k, v, o (no bias); w1, w3, w2; two RMSNorms
    m = get_model("llama", vocab=V, n_ctx=12, n_layer=n, d_model=d, n_head=2, hidden=h)
    assert count_parameters(m) == V * d + n * per_block + d + d * V == 7_152
    assert get_model("llama", d_model=96).blocks[0].mlp.w1.out_features == 256    # 2/3 * 4 * 96, to 32s
    # the SwiGLU MLP by hand: w2(silu(w1 x) * w3 x)
    mlp = m.blocks[0].mlp
    x = torch.randn(3, d)
    expected = (torch.sigmoid(x @ mlp.w1.weight.T) * (x @ mlp.w1.weight.T) * (x @ mlp.w3.weight.T)) @ mlp.w2.weight.T
    torch.testing.assert_close(mlp(x), expected)
    # RMSNorm with weight 1: every row has mean square 1 (up to eps)
    y = m.norm(torch.randn(4, d) * 5)
    torch.testing.assert_close(y.pow(2).mean(-1), torch.ones(4), rtol=1e-4, atol=1e-4)
    # causal: later tokens leave earlier logits unchanged; rotary positions: a shifted sequence differs
    ids = example_input("llama", 2, (10,), vocab=V)
    out = m(ids)
    assert out.shape == (2, 10, V)
    later = ids.clone()
    later[:, 6:] = (later[:, 6:] + 1) % V
    assert torch.equal(m(later)[:, :6], out[:, :6])
    # rotary positions: a score q.k depends on the positions only through their difference
    from memplan.models.networks.llama import _rotate

    att = m.blocks[0].attn
    q, k = torch.randn(att.head_dim), torch.randn(att.head_dim)
    score = lambda i, j: float(_rotate(q, att.cos[i], att.sin[i]) @ _rotate(k, att.cos[j], att.sin[j]))  # noqa: E731
    assert score(5, 2) == pytest.approx(score(3, 0), rel=1e-5) and score(5, 2) != pytest.approx(score(5, 4), rel=1e-3)


def test_transformer_split_input_causal_and_cross_attention():
    m = get_model("transformer", vocab=20, d_model=16, n_head=2, d_ff=32, n_enc=2, n_dec=2, src_len=5,
                  n_ctx=16, dropout=0.0).eval()
    x = example_input("transformer", 2, (5 + 7,), vocab=20)
    assert x.dtype == torch.int64 and int(x.max()) < 20
    y = m(x)
    assert y.shape == (2, 7, 20)                # logits for the 7 target positions
    later = x.clone()
    later[:, 9:] = (later[:, 9:] + 1) % 20      # later target tokens: earlier logits unchanged
    assert torch.equal(m(later)[:, :4], y[:, :4])
    src = x.clone()
    src[:, 4] = (src[:, 4] + 1) % 20            # the last source token: every target position sees it
    assert not torch.isclose(m(src)[:, 0], y[:, 0]).all()


@pytest.mark.parametrize("name,kw,shape,out", [
    ("nasnet_a", dict(channels=4, cells=1), (3, 8, 8), (2, 10)),
    ("unet", dict(base=4, depth=2), (3, 8, 8), (2, 8, 8, 2)),
    ("transformer", dict(vocab=20, d_model=8, n_head=2, d_ff=16, n_enc=2, n_dec=2, src_len=4, n_ctx=8),
     (4 + 3,), (2, 3, 20)),
    ("llama", dict(vocab=20, n_ctx=8, n_layer=2, d_model=8, n_head=2, hidden=16), (6,), (2, 6, 20)),
])
def test_multi_branch_networks_linearize(name, kw, shape, out):
    from memplan.models.graph import is_chain_partition, linearize_model

    torch.manual_seed(0)
    m = get_model(name, **kw).eval()            # eval: no dropout, the stages recompute the same values
    x = example_input(name, 2, shape, vocab=kw.get("vocab"))
    y = m(x)
    assert tuple(y.shape) == out
    lm = linearize_model(m, x, cuts="minimal")
    G = lm.captured.graph
    assert is_chain_partition(G, lm.groups)
    # the separators by definition: nodes v with every node related to v and every edge from
    # {ancestors of v, v} into {descendants of v} leaving v (models.graph's rule, checked by brute force)
    seps = []
    for v in G:
        anc, desc = nx.ancestors(G, v), nx.descendants(G, v)
        if len(anc) + len(desc) + 1 == len(G) and all(u == v for u, w in G.in_edges(desc) if u in anc):
            seps.append(v)
    assert sorted(g[-1] for g in lm.groups) == sorted(s for s in seps if s != lm.captured.source)
    assert torch.equal(lm(x), y)
