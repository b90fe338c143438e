"""The memplan network zoo: PyTorch definitions written for this project (random initialization,
nothing is downloaded, torchvision is not used).

>>> from memplan.models.networks import get_model, example_input, MODELS
>>> m = get_model("resnet18")
>>> x = example_input("resnet18", batch=2, input_shape=(3, 64, 64))

``get_model(name, **kw)`` passes ``kw`` to the constructor (``num_classes``; for ``gpt2``: ``vocab``,
``n_ctx``, ``n_layer``, ``n_embd``, ``n_head``, ``dropout``, ``tie_weights``; for ``nasnet_a``:
``channels``, ``cells``; for ``unet``: ``base``, ``depth``; for ``transformer``: ``vocab``, ``src_len``,
``n_ctx``, ``d_model``, ``n_head``, ``d_ff``, ``n_enc``, ``n_dec``, ``dropout``; for ``llama``: ``vocab``,
``n_ctx``, ``n_layer``, ``d_model``, ``n_head``, ``hidden``).

Token models (:data:`TOKEN_MODELS`) take a LongTensor of token ids; the Transformer encoder-decoder
takes source and target ids side by side in one tensor (batch, src_len + tgt_len).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from . import densenet, gpt2, inception, llama, nasnet, resnet, transformer, unet, vgg
from ..units import did_you_mean

MODELS: dict[str, Callable[..., nn.Module]] = {
    "resnet18": resnet.resnet18, "resnet34": resnet.resnet34, "resnet50": resnet.resnet50,
    "resnet101": resnet.resnet101, "resnet152": resnet.resnet152,
    "preact_resnet200": resnet.preact_resnet200, "preact_resnet1001": resnet.preact_resnet1001,
    "densenet121": densenet.densenet121, "densenet161": densenet.densenet161,
    "densenet169": densenet.densenet169, "densenet201": densenet.densenet201,
    "inception_v3": inception.inception_v3, "vgg16": vgg.vgg16, "vgg19": vgg.vgg19,
    "gpt2": gpt2.gpt2, "llama": llama.llama,
    "nasnet_a": nasnet.nasnet_a, "unet": unet.unet, "transformer": transformer.transformer,
}

#: networks whose input is token ids (and their default vocabulary size)
TOKEN_MODELS = {"gpt2": 50257, "transformer": 8000, "llama": 8000}

# default input shape per image (channels, height, width); gpt2 takes (seq,) token ids
DEFAULT_INPUT = {name: (3, 224, 224) for name in MODELS}
DEFAULT_INPUT["inception_v3"] = (3, 299, 299)
DEFAULT_INPUT["preact_resnet1001"] = (3, 32, 32)
DEFAULT_INPUT["gpt2"] = (1024,)
DEFAULT_INPUT["nasnet_a"] = (3, 32, 32)
DEFAULT_INPUT["llama"] = (256,)
DEFAULT_INPUT["transformer"] = (128,)      # src_len 64 + tgt_len 64


def canonical_name(name: str) -> str:
    """The registry key of ``name``: case, ``-`` and ``_`` are ignored (``ResNet-50`` -> ``resnet50``)."""
    squash = name.lower().replace("-", "").replace("_", "")
    for key in MODELS:
        if key.replace("_", "") == squash:
            return key
    raise KeyError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")


#: constructor arguments that are counts or sizes (at least 1 wherever a zoo model takes them)
_POSITIVE = frozenset({"n_layer", "n_embd", "n_head", "n_ctx", "d_model", "d_ff", "vocab", "hidden", "num_classes",
                       "src_len"})


def get_model(name: str, **kw) -> nn.Module:
    """A freshly initialized model of the zoo (``name`` is case-insensitive; ``-`` and ``_`` are ignored).
    An argument the model does not take raises ValueError naming it (the command line's ``--set``)."""
    key = canonical_name(name)
    given = ', '.join(f'{k}={v!r}' for k, v in kw.items()) or 'none'
    for k, v in kw.items():
        # a count or a size given as 0 or less built a model silently without it (gpt2 n_layer=-1: no block)
        # (a boolean too: --set n_layer=false built a GPT-2 with no block, n_layer=true one of 1)
        if k in _POSITIVE and (isinstance(v, bool) or isinstance(v, (int, float)) and not v >= 1):
            raise ValueError(f"model {key}: {k}={v!r} must be a whole number >= 1 (given: {given})")
    try:
        return MODELS[key](**kw)
    except TypeError as e:
        if "unexpected keyword argument" not in str(e):
            raise ValueError(f"model {key}: {e} (given: {given})") from None
        takes = _options_of(key)     # the constructor's own error named the key, not the ones that work
        bad = next((k for k in kw if k not in takes), next(iter(kw)))
        raise ValueError(f"model {key}: no option {bad!r}{did_you_mean(bad, takes)}; it takes "
                         f"{', '.join(takes) or 'none'} (given: {given})") from None
    except (ValueError, ZeroDivisionError, RuntimeError, OverflowError) as e:
        # a value of the wrong type or out of range (--set n_layer=abc, n_head=0, num_classes=-5): one line
        raise ValueError(f"model {key}: {e} (given: {given})") from None


def _options_of(key: str) -> list[str]:
    """The keyword options zoo model ``key`` takes (``--set``): its module class's constructor's, found by
    building the default model (an error path only)."""
    import inspect

    cls = type(MODELS[key]())
    return [q.name for q in inspect.signature(cls.__init__).parameters.values()
            if q.name != "self" and q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD)]


def example_input(name: str, batch: int, input_shape: tuple[int, ...] | None = None, *, vocab: int | None = None,
                  seed: int = 0, device="cpu") -> torch.Tensor:
    """A random sample input: images N x C x H x W in [0, 1), or token ids N x seq in [0, vocab) for the
    token models (``vocab`` None: the model's default vocabulary, :data:`TOKEN_MODELS`)."""
    key = canonical_name(name)
    shape = tuple(input_shape) if input_shape else DEFAULT_INPUT[key]
    g = torch.Generator().manual_seed(seed)
    if key in TOKEN_MODELS:
        vocab = TOKEN_MODELS[key] if vocab is None else vocab
        return torch.randint(0, vocab, (batch, *shape), generator=g).to(device)
    return torch.rand((batch, *shape), generator=g).to(device)


def example_input_bytes(name: str, batch: int, input_shape: tuple[int, ...] | None = None) -> int:
    """Bytes of :func:`example_input`'s tensor, worked out without making it (an input of 120 GB had
    been allocated to be measured): int64 token ids or float32 images, ``batch`` x the shape."""
    key = canonical_name(name)
    shape = tuple(input_shape) if input_shape else DEFAULT_INPUT[key]
    n = int(batch)
    for d in shape:
        n *= int(d)
    return n * (8 if key in TOKEN_MODELS else 4)


def count_parameters(model: nn.Module) -> int:
    """Number of distinct parameters (a tied weight counts once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


__all__ = ["MODELS", "DEFAULT_INPUT", "TOKEN_MODELS", "canonical_name", "get_model", "example_input", "count_parameters"]
