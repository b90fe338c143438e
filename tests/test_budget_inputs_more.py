"""Bad input to ``memplan.compile_under_budget`` and ``memplan budget`` found by a probe: one InputError
naming the parameter (API) or one line on stderr naming the option with exit status 2 (CLI), never a
raw torch error, a silently ignored option or a flag read by its truthiness.

Nearly every case is refused before anything is compiled; the two that need a search compile one
fraction of a tiny model.
"""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

import memplan  # noqa: E402
from memplan.experiments.cli import main  # noqa: E402
from memplan.models.solution import InfeasibleError, InputError  # noqa: E402

#: the probe's tiny GPT-2 (vocabulary 100, context 32), one fraction, eager chain plans only
GPT = ["--model", "gpt2", "--batch", "2", "--input", "32", "--set", "n_layer=2", "--set", "n_embd=32",
       "--set", "n_head=2", "--set", "vocab=100", "--set", "n_ctx=32", "--repeats", "1"]
RUN = ["--fractions", "1", "--no-compiled-stages"]


def _gpt():
    from memplan.models.networks import get_model

    torch.manual_seed(0)
    return get_model("gpt2", n_layer=2, n_embd=32, n_head=2, vocab=100, n_ctx=32, dropout=0.0).train()


def _ce(out, t):
    return torch.nn.functional.cross_entropy(out.flatten(0, 1), t.flatten())


def _ids(batch=2, seq=32, lo=0, hi=100):
    return torch.randint(lo, hi, (batch, seq), generator=torch.Generator().manual_seed(1))


def _budget(model=None, inputs=None, memory="1GiB", **kw):
    """``compile_under_budget`` on the tiny GPT-2 with cross-entropy, ``kw`` replacing its defaults."""
    args = dict(loss_fn=_ce, example_targets=(_ids(),), fractions=(1.0,), repeats=1, compiled_stages=False)
    args.update(kw)
    return memplan.compile_under_budget(_gpt() if model is None else model, (_ids(),) if inputs is None else inputs,
                                        memory, **args)


# --- the API --------------------------------------------------------------------------------------

def test_targets_given_as_a_tensor_are_refused():
    """A tensor for example_targets was unpacked row by row (a TypeError from inside the loss)."""
    with pytest.raises(InputError, match=r"^compile_under_budget: example_targets must be a tuple or list .*"
                                         r"not a Tensor$"):
        _budget(example_targets=_ids())


@pytest.mark.parametrize("kw, name", [
    (dict(chain="no"), "chain"),                    # 'no' is truthy: the chain plans ran
    (dict(chain=1), "chain"),
    (dict(compiled_stages="false"), "compiled_stages"),
    (dict(compiled_stages=None), "compiled_stages"),
])
def test_flags_must_be_booleans(kw, name):
    with pytest.raises(InputError, match=rf"compile_under_budget: {name} must be True or False, got "):
        _budget(**kw)


def test_offload_one_is_not_true():
    """offload=1 passed the check (1 == True) and was then neither True nor 'emulated'."""
    with pytest.raises(InputError, match="offload must be False, True .* or 'emulated'.*got 1$"):
        _budget(offload=1)


@pytest.mark.parametrize("kw, match", [
    (dict(fractions=1.0), r"fractions must be a list of distinct numbers in \[0, 1\].*got 1\.0$"),
    (dict(fractions=(1.0, 1.0)), r"fractions must be a list of distinct numbers"),
    (dict(fractions=(True,)), r"fractions must be a list of distinct numbers"),
    (dict(loss_fn="cross_entropy"), r"loss_fn must be a function .*got a str$"),
    (dict(solver_time_limit=-1), r"solver_time_limit must be a positive number of seconds or None, got -1$"),
    (dict(solver_time_limit=0), r"solver_time_limit must be a positive number of seconds or None, got 0$"),
    (dict(solver_time_limit=math.nan), r"solver_time_limit must be a positive number"),
    (dict(time_limit=True), r"time_limit must be a positive number"),
    (dict(repeats=True), r"repeats must be a whole number >= 1"),
])
def test_bad_values_are_input_errors(kw, match):
    with pytest.raises(InputError, match=match):
        _budget(**kw)


@pytest.mark.parametrize("kw, match", [
    # options the CLI refuses, which the API took and ignored
    (dict(bandwidth="10GB/s"), r"bandwidth '10GB/s' is the host link of offload, which is False"),
    (dict(cuda_peak="allocated"), r"cuda_peak 'allocated' reads the CUDA caching allocator, and the model is on cpu"),
    (dict(stage_fractions=(1.0, 0.5)), r"stage_fractions \(1\.0, 0\.5\) are budgets of the chain's compiled "
                                       r"stages, and compiled_stages=False leaves them out"),
    (dict(stage_fractions=(1.0, 0.5), compiled_stages=True, chain=False), r"and chain=False leaves them out"),
    # and the ones nothing used
    (dict(stage_solver="pytorch"), r"stage_solver 'pytorch' is the solver inside stages compiled at a stage "
                                   r"fraction below 1, and stage_fractions has none"),
    (dict(solver="memplan", fractions=()), r"solver 'memplan' is the partitioner's solver for the compiled "
                                           r"fractions, and fractions is empty"),
    (dict(runtime_estimator="measured", fractions=()), r"runtime_estimator 'measured' weighs"),
    (dict(loss_fn=None), r"example_targets are passed to loss_fn, and loss_fn is None"),
    (dict(offload="emulated", chain=False), r"offload's plans run on the chain, and chain=False leaves it out"),
])
def test_options_nothing_uses_are_refused(kw, match):
    with pytest.raises(InputError, match=match):
        _budget(**kw)


@pytest.mark.parametrize("inputs, targets, match", [
    ((), None, r"model\(\*example_inputs\) failed \(TypeError: .*missing 1 required positional argument"),
    ((None,), None, r"model\(\*example_inputs\) failed \(AttributeError: "),
    ((torch.randn(2, 32),), None, r"model\(\*example_inputs\) failed \(RuntimeError: Expected tensor for "
                                  r"argument #1 'indices' .* \(while checking arguments for embedding\)\)"),
    ((_ids(lo=100, hi=200),), None, r"model\(\*example_inputs\) failed \(IndexError: index out of range"),
    ((_ids(seq=64),), (_ids(seq=64),), r"model\(\*example_inputs\) failed \(IndexError: "),     # past n_ctx
    (None, (_ids(batch=3, seq=7),), r"loss_fn\(output, \*example_targets\) failed \(ValueError: Expected input "
                                    r"batch_size \(64\) to match target batch_size \(21\)"),
    (None, (), r"loss_fn\(output, \*example_targets\) failed \(TypeError: .*missing 1 required positional"),
])
def test_the_first_eager_forward_and_loss_name_what_was_given(inputs, targets, match):
    """Errors of the model or the loss on the examples, raised by torch from the first compile before
    (or an AttributeError of None), are one InputError quoting the error's first line in full."""
    kw = {} if targets is None else dict(example_targets=targets)
    with pytest.raises(InputError, match=r"^compile_under_budget: " + match) as e:
        _budget(inputs=inputs, **kw)
    assert "\n" not in str(e.value)


def test_the_first_eager_forward_leaves_the_random_state_alone():
    """The check's forward runs a dropout: it draws no mask from the search's random state."""

    class Drop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.drop = torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)

        def forward(self, x):
            return self.drop(self.lin(x)).sum()

    torch.manual_seed(7)
    model, x = Drop(), torch.randn(3, 4)
    before = torch.get_rng_state()
    with pytest.raises(InputError, match="nothing to try"):     # after the check, before anything runs
        memplan.compile_under_budget(model, (x,), "1MiB", fractions=())
    assert torch.equal(torch.get_rng_state(), before)


def test_less_than_one_byte_is_refused():
    with pytest.raises(InputError, match=r"memory 0\.5 is less than one byte"):
        _budget(memory=0.5)


def test_a_refusal_gives_the_budget_in_bytes_and_defaults_given_explicitly_are_taken(one_torch_thread):
    """The refusal showed both sides in one rounded unit (376.0 KiB against 376.0 KiB); the budget's
    bytes are in it now. The defaults of the options checked above, passed explicitly, are accepted."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 4))
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    with pytest.raises(InfeasibleError) as e:
        memplan.compile_under_budget(model, [x], 2000.9, loss_fn=torch.nn.functional.mse_loss, example_targets=[y],
                                     fractions=[1], repeats=1, chain=False, compiled_stages=True,
                                     stage_fractions=[1], stage_solver="memplan-peak", runtime_estimator="flops",
                                     cuda_peak="requested", offload=False, solver_time_limit=5)
    msg = str(e.value)
    assert msg.startswith("memory 2.0 KiB is below every measured peak: it is 2000 bytes and the smallest is "), msg
    assert e.value.minimum > 2000


# --- the CLI --------------------------------------------------------------------------------------

def _cli(capsys, *args) -> tuple[int, str]:
    """``memplan budget`` on the tiny GPT-2: the exit status and stderr's one line (argparse's own
    refusals raise SystemExit)."""
    try:
        rc = main(["budget", *GPT, *args])
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    return rc, err


@pytest.mark.parametrize("args, needle", [
    (["--no-compiled-stages", "--stage-fractions", "1,0.5"],
     "memplan: error: --stage-fractions: budgets of the chain's compiled stages, and --no-compiled-stages leaves "
     "them out; give one of the two"),
    (["--stage-solver", "pytorch"], "memplan: error: --stage-solver pytorch: the solver inside stages compiled at a "
                                    "--stage-fractions value below 1, and there is none"),
    (["--solver", "memplan", "--fractions", ""], "memplan: error: --solver memplan: the partitioner's solver for the "
                                                 "compiled --fractions, and --fractions is empty"),
    (["--runtime-estimator", "measured", "--fractions", ""], "memplan: error: --runtime-estimator measured: "),
    (["--no-chain", "--fractions", ""], "memplan: error: --no-chain with an empty --fractions: nothing to try"),
    (["--fractions", "1,1,1"], "--fractions '1,1,1': expected distinct numbers in [0, 1], and 1 is given more "
                               "than once"),
    (["--time-limit", "-5"], "--time-limit '-5': give a positive number of seconds"),
    (["--time-limit", "0"], "--time-limit '0': give a positive number of seconds"),
    (["--time-limit", "nan"], "--time-limit 'nan': give a positive number of seconds"),
    (["--seed", "99999999999999999999"], "--seed '99999999999999999999': give a whole number from 0 to 2**64 - 1"),
    (["--seed", "-1"], "--seed '-1': give a whole number from 0 to 2**64 - 1"),
    # nothing compiled: --backend had been taken and unused
    (["--backend", "inductor", "--fractions", "", "--no-compiled-stages"], "memplan: error: --backend inductor: the "
                                                                           "compiler of the --fractions"),
    (["--set", "n_layer=1"], "memplan: error: --set n_layer: given 2 times (--set n_layer=2 --set n_layer=1); give "
                             "each key once"),
])
def test_cli_refusals_name_the_option(capsys, args, needle):
    rc, err = _cli(capsys, "--memory", "1GiB", *args)
    assert rc == 2 and needle in err, err


def test_cli_memory_below_one_byte_names_the_option(capsys):
    rc, err = _cli(capsys, "--memory", "0.5")
    assert rc == 2 and err == ("memplan: error: --memory '0.5': less than one byte (the budget is whole bytes, a "
                               "fraction of one rounded down); e.g. 300MiB")


def test_cli_refusal_shows_the_budget_rounded_down_in_bytes(capsys, one_torch_thread):
    rc, err = _cli(capsys, "--memory", "2000.7", *RUN)
    assert rc == 2
    assert err.startswith("memplan: error: memory 2.0 KiB is below every measured peak: it is 2000 bytes and the "
                          "smallest is "), err
