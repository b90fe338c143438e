"""U-Net (Ronneberger, Fischer and Brox 2015, "U-Net: convolutional networks for biomedical image
segmentation"), written for memplan.

An encoder of ``depth`` levels (two 3x3 convolutions each, then 2x2 max pooling; widths ``base``,
2 ``base``, ...), a bottleneck (two 3x3 convolutions, width ``base`` 2^depth), and a decoder that at
each level up-samples with a 2x2 stride-2 transposed convolution (halving the width), **concatenates
the encoder's feature map of the same level** (the skip connection) and applies two 3x3 convolutions;
a 1x1 convolution gives the class scores. Unlike the paper, the 3x3 convolutions are padded (the
output has the input's resolution, no cropping) and each is conv (no bias) - BN - ReLU.

What matters for memplan: the encoder's feature map of level k stays alive until decoder level k
reads it, so every boundary inside the U carries several tensors, and a single-tensor linearization
(models.graph) cannot cut between the first encoder level and the last decoder level.

The output is the per-pixel class scores laid out N x H x W x classes (a permuted view of the
N x classes x H x W map), so that a cross-entropy over the last dimension (the zoo's default loss)
is the per-pixel loss. Defaults: the paper's widths (base 64, depth 4), 3 input channels, 2 classes;
height and width must be divisible by 2^depth.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class DoubleConv(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.ops = nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())

    def forward(self, x):
        return self.ops(x)


class UNet(nn.Module):
    def __init__(self, num_classes: int = 2, base: int = 64, depth: int = 4, in_channels: int = 3):
        super().__init__()
        if depth < 1:
            raise ValueError(f"depth={depth}: a U-Net needs at least one level")
        widths = [base * 2 ** k for k in range(depth + 1)]
        self.down = nn.ModuleList([DoubleConv(in_channels, widths[0])]
                                  + [DoubleConv(widths[k - 1], widths[k]) for k in range(1, depth)])
        self.bottleneck = DoubleConv(widths[depth - 1], widths[depth])
        self.up = nn.ModuleList([nn.ConvTranspose2d(widths[k + 1], widths[k], 2, stride=2)
                                 for k in reversed(range(depth))])
        self.dec = nn.ModuleList([DoubleConv(2 * widths[k], widths[k]) for k in reversed(range(depth))])
        self.head = nn.Conv2d(widths[0], num_classes, 1)

    def forward(self, x):
        skips = []
        for down in self.down:
            x = down(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.bottleneck(x)
        for up, dec, skip in zip(self.up, self.dec, reversed(skips)):
            x = dec(torch.cat([skip, up(x)], 1))
        return self.head(x).permute(0, 2, 3, 1)


def unet(**kw): return UNet(**kw)
