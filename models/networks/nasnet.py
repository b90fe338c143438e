"""A NASNet-A-style network (Zoph et al. 2018, "Learning transferable architectures for scalable image
recognition"), written for memplan.

What matters for memplan is the wiring: **every cell reads the outputs of the two previous cells**
(h_{i-1} and h_{i-2}), so two tensors cross every boundary between cells and a single-tensor
linearization (models.graph) cannot cut the cell stack.

Cell i gets s0 = h_{i-2} and s1 = h_{i-1}. Each is first brought to the cell's width C: s1 by
ReLU - 1x1 conv - BN; s0 the same way, or, when cell i-1 halved the resolution, by a factorized
reduction (ReLU, two stride-2 1x1 convolutions, the second on the input shifted by one pixel, each
giving half of the channels, concatenated, BN). Then five blocks each add two operations applied to
earlier states (states 0 and 1 are the preprocessed s0 and s1, state 2 + b the output of block b):

- normal cell: (sep3 s1 + s1), (sep3 s0 + sep5 s1), (avg3 s1 + s0), (avg3 s0 + avg3 s0),
  (sep5 s0 + sep3 s0); output: s1 and the five blocks concatenated (6 C channels);
- reduction cell: (sep5 s1 + sep7 s0), (max3 s1 + sep7 s0), (avg3 s1 + sep5 s0),
  (avg3 block1 + block2), (sep3 block1 + max3 s1); output: blocks 2..5 concatenated (4 C). The
  operations applied to s0 and s1 have stride 2.

``sepK`` is ReLU - depthwise KxK conv - pointwise 1x1 conv - BN, twice (the first with the stride);
``avg3`` / ``max3`` 3x3 pooling with padding 1 (average without the padding). The network (CIFAR-style,
like NASNet-A N @ ...): a 3x3 stem conv to ``3 C`` channels + BN, then three stacks of ``cells``
normal cells separated by two reduction cells (width C, 2C, 4C), ReLU, global average pooling and
the classifier. No auxiliary head, no drop-path. The first cell reads the stem's output as both
h_{i-1} and h_{i-2}.

Small defaults (C = 16, 4 cells per stack, 14 cells, 10 classes, input 3x32x32; the resolution must
be divisible by 4). No ReLU is in-place (the executor feeds stages detached leaf tensors).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

#: (input, operation, input, operation) per block; states 0, 1 = preprocessed h_{i-2}, h_{i-1}
NORMAL = [(1, "sep3", 1, "skip"), (0, "sep3", 1, "sep5"), (1, "avg3", 0, "skip"), (0, "avg3", 0, "avg3"),
          (0, "sep5", 0, "sep3")]
NORMAL_CONCAT = [1, 2, 3, 4, 5, 6]
REDUCTION = [(1, "sep5", 0, "sep7"), (1, "max3", 0, "sep7"), (1, "avg3", 0, "sep5"), (2, "avg3", 3, "skip"),
             (2, "sep3", 1, "max3")]
REDUCTION_CONCAT = [3, 4, 5, 6]


class ReLUConvBN(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.relu = nn.ReLU()
        self.conv = nn.Conv2d(cin, cout, 1, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return self.bn(self.conv(self.relu(x)))


class FactorizedReduce(nn.Module):
    """Halve the resolution without losing every other pixel: two stride-2 1x1 convolutions, the
    second on the input shifted by one pixel."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.relu = nn.ReLU()
        self.conv_a = nn.Conv2d(cin, cout // 2, 1, stride=2, bias=False)
        self.conv_b = nn.Conv2d(cin, cout - cout // 2, 1, stride=2, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        x = self.relu(x)
        shifted = F.pad(x, (0, 1, 0, 1))[:, :, 1:, 1:]
        return self.bn(torch.cat([self.conv_a(x), self.conv_b(shifted)], 1))


class SepConv(nn.Module):
    def __init__(self, c: int, k: int, stride: int):
        super().__init__()
        layers = []
        for s in (stride, 1):
            layers += [nn.ReLU(), nn.Conv2d(c, c, k, stride=s, padding=k // 2, groups=c, bias=False),
                       nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c)]
        self.ops = nn.Sequential(*layers)

    def forward(self, x):
        return self.ops(x)


class Pool(nn.Module):
    def __init__(self, kind: str, stride: int):
        super().__init__()
        self.pool = (nn.AvgPool2d(3, stride=stride, padding=1, count_include_pad=False) if kind == "avg"
                     else nn.MaxPool2d(3, stride=stride, padding=1))

    def forward(self, x):
        return self.pool(x)


def _op(name: str, c: int, stride: int) -> nn.Module | None:
    if name == "skip":
        if stride != 1:
            return FactorizedReduce(c, c)
        return None                     # identity: the state itself
    if name.startswith("sep"):
        return SepConv(c, int(name[3:]), stride)
    return Pool(name[:3], stride)


class Cell(nn.Module):
    def __init__(self, c_pp: int, c_p: int, c: int, reduction: bool, reduction_prev: bool):
        super().__init__()
        self.reduction = reduction
        self.pre0 = FactorizedReduce(c_pp, c) if reduction_prev else ReLUConvBN(c_pp, c)
        self.pre1 = ReLUConvBN(c_p, c)
        genotype = REDUCTION if reduction else NORMAL
        self.concat = REDUCTION_CONCAT if reduction else NORMAL_CONCAT
        self.inputs = [(a, b) for a, _, b, _ in genotype]
        self.ops = nn.ModuleList()
        self.identity = []
        for a, op_a, b, op_b in genotype:
            for idx, name in ((a, op_a), (b, op_b)):
                op = _op(name, c, 2 if reduction and idx < 2 else 1)
                self.identity.append(op is None)
                self.ops.append(op if op is not None else nn.Sequential())   # placeholder, never called
        self.out_channels = len(self.concat) * c

    def forward(self, s0, s1):
        states = [self.pre0(s0), self.pre1(s1)]
        for i, (a, b) in enumerate(self.inputs):
            ya = states[a] if self.identity[2 * i] else self.ops[2 * i](states[a])
            yb = states[b] if self.identity[2 * i + 1] else self.ops[2 * i + 1](states[b])
            states.append(ya + yb)
        return torch.cat([states[k] for k in self.concat], 1)


class NASNetA(nn.Module):
    def __init__(self, num_classes: int = 10, channels: int = 16, cells: int = 4, stem_multiplier: int = 3,
                 in_channels: int = 3):
        super().__init__()
        c_stem = stem_multiplier * channels
        self.stem = nn.Sequential(nn.Conv2d(in_channels, c_stem, 3, padding=1, bias=False), nn.BatchNorm2d(c_stem))
        c_pp, c_p, c = c_stem, c_stem, channels
        self.cells = nn.ModuleList()
        reduction_prev = False
        for stack in range(3):
            kinds = ([True] if stack else []) + [False] * cells
            for reduction in kinds:
                if reduction:
                    c *= 2
                cell = Cell(c_pp, c_p, c, reduction, reduction_prev)
                self.cells.append(cell)
                reduction_prev = reduction
                c_pp, c_p = c_p, cell.out_channels
        self.relu = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c_p, num_classes)

    def forward(self, x):
        s0 = s1 = self.stem(x)
        for cell in self.cells:
            s0, s1 = s1, cell(s0, s1)
        return self.fc(torch.flatten(self.pool(self.relu(s1)), 1))


def nasnet_a(**kw): return NASNetA(**kw)
