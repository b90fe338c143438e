from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]   # the repository (instances/, README.md, pyproject.toml)


@pytest.fixture(scope="session")
def toy_chain():
    """The toy chain of paper 004, Table 2 (V100, MiB, ms)."""
    from memplan.models.instance import load_chain

    return load_chain(ROOT / "instances" / "paper004_table2.json")


MiB = 2**20


def fig4(n):
    """The chain of paper 004, Figure 4 (the DPs' and the bound's tests): L = n+2, u_f^1 = k = n-2,
    u_f^2 = 2, sizes 3 except a^0 = 0, a^1 = 1, a^L = 4."""
    from memplan.models.chain import Chain

    k, L = n - 2, n + 2
    uf = [0] * L
    uf[0], uf[1] = k, 2
    wa = [3] * (L + 1)
    wa[0], wa[1], wa[L] = 0, 1, 4
    return Chain.from_stages(uf=uf, ub=[0] * L, wa=wa)


def write_chain_instance(chain, path, name="r4", batch=16):
    """Write a Chain (random_chain) as an instance file, for CLI tests."""
    import json

    rows = [{"stage": 0, "name": "input", "a": chain.wa[0]}]
    for l in range(1, chain.L + 1):
        rows.append({"stage": l, "name": f"s{l}", "u_f": chain.uf[l], "u_b": chain.ub[l], "a": chain.wa[l],
                     "W": chain.weights[l]})
    rows.append({"stage": chain.L + 1, "name": "loss", "a": 0})
    path.write_text(json.dumps({"format": "memplan-instance/1", "name": name,
                                "units": {"time": "s", "memory": "B"}, "provenance": {"batch": batch},
                                "stages": rows}))
    return path


def remat_limits(chain, fracs):
    """Integer memory limits at fractions of the way from the minimum feasible memory to store-all's peak."""
    import math

    from memplan.baselines.remat_heuristics import store_all_schedule
    from memplan.baselines.remat_rotor import min_memory
    from memplan.models.remat import simulate_remat

    lo = min_memory(chain)
    hi = simulate_remat(chain, store_all_schedule(chain)).peak_memory
    return [float(math.floor(lo + f * (hi - lo))) for f in fracs]


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op torch thread: on a shared 2-core machine OpenMP spinning makes 2 threads ~10x slower."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def token_loss_case():
    """A token loss stage's sample, the same for the eager and the compiled chunked-loss tests: targets
    3 x 10 over 50 classes with ignored tokens (-100: the mean's denominator counts the others),
    ``TokenCrossEntropy``, hidden states 3 x 10 x 8 (seed 0)."""
    import torch

    from memplan.models.chunked_loss import TokenCrossEntropy

    torch.manual_seed(0)
    targets = torch.randint(0, 50, (3, 10))
    targets[0, :4] = -100
    targets[2, 7] = -100
    return targets, TokenCrossEntropy(), torch.randn(3, 10, 8)


def zoo_autograd_reference(name: str, kw: dict, shape: tuple, batch: int = 2, vocab: int = 50):
    """A zoo model (seed 0) in training mode, its example input, the classification loss, and plain
    autograd's loss value and parameter gradients on a deep copy (seed 123 before the forward, for
    dropout's masks): the reference the executors' tests compare with ``torch.equal``."""
    import copy

    import torch

    from memplan.models.networks import example_input, get_model
    from memplan.models.profiler import classification_loss

    torch.manual_seed(0)
    model = get_model(name, **kw).train()
    x = example_input(name, batch, shape, vocab=vocab)
    loss_fn = classification_loss()
    ref = copy.deepcopy(model)
    torch.manual_seed(123)
    loss = loss_fn(ref(x))
    loss.backward()
    grads = {n: p.grad.clone() for n, p in ref.named_parameters()}
    return model, x, loss_fn, float(loss.detach()), grads


def linearize_keeping_views(model, x, loss_fn=None):
    """``linearize_model`` with the groups it made before 2026-11-28, which an instance recorded then
    rebuilds: a stage that returns its input's storage (ResNet's flatten, a view of the pooled
    features; GPT-2's embedding dropout with p = 0) stays a stage of its own. The offloading executors
    must still handle such values (they share a storage: ``models.runtime_offload.view_stages``), so
    their tests run on these stages."""
    from memplan.models.graph import _cross_entropy, capture, linearize_model, merge_unsaved_cuts, saved_outputs

    cap = capture(model, x)
    groups, head = merge_unsaved_cuts(cap.groups(), saved_outputs(cap, x, loss_fn or _cross_entropy))
    return linearize_model(model, x, loss_fn, groups=groups, head_group=head)


def offload_test_chain(name: str, kw: dict, shape: tuple):
    """The offloading executors' test case: the zoo reference (:func:`zoo_autograd_reference`), the
    chain profiled on the same stages (sizes as measured) with fixed times (1 ms + 1 ms per 100 kB
    kept, the backward twice the forward: the solvers then choose the same schedules on any machine),
    and a link that moves all of the chain's abar in one store-all step. The stages are
    :func:`linearize_keeping_views`'s (values that share a storage included)."""
    import copy
    import dataclasses

    from memplan.models.profiler import profile_chain

    model, x, loss_fn, loss, grads = zoo_autograd_reference(name, kw, shape)
    lm = linearize_keeping_views(copy.deepcopy(model), x, loss_fn)
    prof = profile_chain(lm.stages, x, lm.loss_stage(loss_fn), repeats=1, names=lm.names)
    uf = 1e-3 * (1.0 + prof.wabar / 1e5)
    uf[0] = 0.0
    chain = dataclasses.replace(prof, uf=uf, ub=2 * uf)
    bandwidth = float(chain.wabar[1:].sum() / chain.store_all_time())
    return dict(name=name, model=model, x=x, loss_fn=loss_fn, loss=loss, grads=grads, chain=chain,
                bandwidth=bandwidth)


def write_branches_graph(path):
    """A PipeDream graph.txt at ``path``: an input, two branches of two layers each (1 + 2 s and
    2 + 4 s forward + backward per layer), and a join; each activation 8 bytes, each Linear 4 bytes of
    parameters. Returns ``path``."""
    lines = ["node1 -- Input(x) -- forward_compute_time=0.000, backward_compute_time=0.000, "
             "activation_size=8.0, parameter_size=0.0"]
    for n, (f, b) in {"node2": (1, 2), "node3": (1, 2), "node4": (2, 4), "node5": (2, 4), "node6": (0, 0)}.items():
        lines.append(f"{n} -- Linear(x) -- forward_compute_time={f:.3f}, backward_compute_time={b:.3f}, "
                     f"activation_size=8.0, parameter_size=4.0")
    lines += ["\tnode1 -- node2", "\tnode2 -- node3", "\tnode1 -- node4", "\tnode4 -- node5", "\tnode3 -- node6",
              "\tnode5 -- node6"]
    path.write_text("\n".join(lines) + "\n")
    return path


def masked_mlp_case():
    """A model that reads a mask beside its input (``model(x, mask)``), an example, its targets and two
    masks: the compile_under_budget tests of models with several inputs, eager and compiled."""
    import torch

    class Masked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.GELU(), torch.nn.Linear(128, 32),
                                           torch.nn.LayerNorm(32), torch.nn.Linear(32, 128), torch.nn.Tanh(),
                                           torch.nn.Linear(128, 8))

        def forward(self, x, mask):
            return self.net(x).masked_fill(mask, 0.0)

    torch.manual_seed(1)
    model = Masked()
    x, y = torch.randn(8, 16, 32), torch.randn(8, 16, 8)
    masks = [torch.rand(8, 16, 8) > 0.5, torch.rand(8, 16, 8) > 0.2]
    return model, x, y, masks
