"""The network zoo: parameter counts of the published architectures, shapes, and the registry."""
import pytest

torch = pytest.importorskip("torch")

from memplan.models.networks import MODELS, count_parameters, example_input, get_model  # noqa: E402

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
    assert len(MODELS) == 15
    with pytest.raises(KeyError, match="unknown model"):
        get_model("resnet19")
    assert get_model("ResNet-18").fc.out_features == 1000
    assert example_input("gpt2", 3, (5,)).dtype == torch.int64
