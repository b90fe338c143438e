"""The zoo against torchvision's own definitions (issue 20, item 4): parameter counts, the shapes of
every parameter, and the output shape, for every network that torchvision also has.

torchvision is optional (it is not installed with memplan; the GPU machine has it): it is imported
when :func:`torchvision_table` runs, and its absence is an ImportError that says so. Models are built
on the ``meta`` device (no memory, no initialization cost); the forward pass that gives the output
shape runs there too, and on the CPU at batch 1 where an operation has no meta kernel.

GPT-2 small is compared with Hugging Face ``transformers``' ``GPT2LMHeadModel`` when that package is
importable (``include_transformers``); torchvision has no GPT-2.

    python -c "from memplan.models.networks.torchvision_check import torchvision_table; print(torchvision_table())"
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Callable

import torch

from . import DEFAULT_INPUT, get_model

#: zoo name -> (torchvision.models constructor name, keyword arguments): the zoo's defaults (1000
#: classes; Inception v3 without its auxiliary head, whose input transform is off in both)
TORCHVISION: dict[str, tuple[str, dict[str, Any]]] = {
    "resnet18": ("resnet18", {}), "resnet34": ("resnet34", {}), "resnet50": ("resnet50", {}),
    "resnet101": ("resnet101", {}), "resnet152": ("resnet152", {}),
    "densenet121": ("densenet121", {}), "densenet161": ("densenet161", {}),
    "densenet169": ("densenet169", {}), "densenet201": ("densenet201", {}),
    "inception_v3": ("inception_v3", {"aux_logits": False, "init_weights": False, "transform_input": False}),
    "vgg16": ("vgg16", {}), "vgg19": ("vgg19", {}),
}

COLUMNS = ["network", "reference", "zoo_params", "reference_params", "params_equal", "param_shapes_equal",
           "input", "zoo_output", "reference_output", "output_equal", "equal", "note"]


def _count(m: torch.nn.Module) -> int:
    return sum(p.numel() for p in {id(p): p for p in m.parameters()}.values())


def _shapes(m: torch.nn.Module, transposed_ok: bool = False) -> list[tuple[int, ...]]:
    """The sorted parameter shapes (each shape's dimensions sorted too when ``transposed_ok``:
    transformers' GPT-2 stores its projections as Conv1D, (in, out), where nn.Linear has (out, in))."""
    shapes = (tuple(p.shape) for p in {id(p): p for p in m.parameters()}.values())
    return sorted(tuple(sorted(s)) if transposed_ok else s for s in shapes)


def _output_shape(build: Callable[[], torch.nn.Module], x: torch.Tensor) -> tuple[tuple[int, ...], str]:
    """Output shape of ``build()`` in eval mode on ``x``: on meta, else on the CPU (batch 1)."""
    try:
        with torch.device("meta"):
            m = build().eval()
        with torch.no_grad():
            y = m(x.to("meta"))
        return tuple(getattr(y, "logits", y).shape), "meta"
    except Exception:  # noqa: BLE001 - no meta kernel (or a data-dependent step): run it for real
        m = build().eval()
        with torch.no_grad():
            y = m(x[:1].cpu())
        return (x.shape[0],) + tuple(getattr(y, "logits", y).shape)[1:], "cpu, batch 1"


def _compare(name: str, reference: str, zoo: Callable[[], torch.nn.Module], ref: Callable[[], torch.nn.Module],
             x: torch.Tensor, transposed_ok: bool = False) -> dict[str, Any]:
    with torch.device("meta"):
        zm, rm = zoo(), ref()
    zo, where_z = _output_shape(zoo, x)
    ro, where_r = _output_shape(ref, x)
    row = {"network": name, "reference": reference, "zoo_params": _count(zm), "reference_params": _count(rm),
           "param_shapes_equal": _shapes(zm, transposed_ok) == _shapes(rm, transposed_ok),
           "input": "x".join(map(str, x.shape)),
           "zoo_output": "x".join(map(str, zo)), "reference_output": "x".join(map(str, ro)),
           "note": f"forward on {where_z} / {where_r}" + ("; shapes compared up to transposition" if transposed_ok
                                                           else "")}
    row["params_equal"] = row["zoo_params"] == row["reference_params"]
    row["output_equal"] = zo == ro
    row["equal"] = bool(row["params_equal"] and row["param_shapes_equal"] and row["output_equal"])
    return row


def torchvision_table(names: list[str] | None = None, *, batch: int = 2,
                      include_transformers: bool = True) -> list[dict[str, Any]]:
    """One row per network that torchvision has (``names``: a subset of :data:`TORCHVISION`), with
    the zoo's and torchvision's parameter counts, whether the multisets of parameter shapes agree,
    and both output shapes on a batch of ``batch`` at the zoo's default input size; ``equal`` when all
    three agree. Raises ImportError when torchvision cannot be imported.
    """
    try:
        import torchvision.models as tvm  # optional: on the GPU machine
    except ImportError as e:
        raise ImportError(f"torchvision cannot be imported here ({e}); the check runs where torchvision is "
                          "installed (the GPU machine has it)") from None
    rows = []
    for name in (names or list(TORCHVISION)):
        if name not in TORCHVISION:
            raise ValueError(f"torchvision_table: {name!r} has no torchvision counterpart; choose from "
                             f"{', '.join(TORCHVISION)}")
        ctor, kw = TORCHVISION[name]
        x = torch.rand((batch, *DEFAULT_INPUT[name]))
        rows.append(_compare(name, f"torchvision.models.{ctor}", lambda n=name: get_model(n),
                             lambda c=ctor, k=kw: getattr(tvm, c)(weights=None, **k), x))
    if include_transformers and names is None:
        try:
            from transformers import GPT2Config, GPT2LMHeadModel  # optional
        except ImportError:
            pass
        else:
            x = torch.randint(0, 50257, (batch, 16))
            rows.append(_compare("gpt2", "transformers.GPT2LMHeadModel (GPT2Config())", lambda: get_model("gpt2"),
                                 lambda: GPT2LMHeadModel(GPT2Config()), x, transposed_ok=True))
    return rows


def write_table(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """The table as CSV (columns :data:`COLUMNS`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


__all__ = ["TORCHVISION", "COLUMNS", "torchvision_table", "write_table"]
