"""Inception v3 (Szegedy et al. 2016, "Rethinking the Inception architecture"), written for memplan.

Every convolution is conv (no bias) - BN (eps 1e-3) - ReLU. Stem: 3x3/2 (32), 3x3 (32), 3x3 pad 1 (64),
max-pool 3/2, 1x1 (80), 3x3 (192), max-pool 3/2; then three "A" modules (35x35 grid, 288 channels
out), a "B" grid reduction (768), four "C" modules with factorized 7x7 convolutions (widths 128, 160,
160, 192 in the 7x7 branches), a "D" grid reduction (1280) and two "E" modules with expanded 3x3
branches (2048), global average pooling, dropout and the classifier. Each module concatenates its
parallel branches, which is what the linearization groups into one virtual layer.

The auxiliary classifier (after the last "C" module) is off by default: it is a second output, so
the network is no longer a single-input single-output chain. Parameters with 1000 classes:
23,834,568 without the auxiliary head, 27,161,264 with it. Input 299x299 (at least 75x75).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ConvBN(nn.Module):
    def __init__(self, cin: int, cout: int, kernel, stride=1, padding=0):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride=stride, padding=padding, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=1e-3)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.bn(self.conv(x)))


class ModuleA(nn.Module):
    def __init__(self, cin: int, pool_features: int):
        super().__init__()
        self.b1 = ConvBN(cin, 64, 1)
        self.b5_1, self.b5_2 = ConvBN(cin, 48, 1), ConvBN(48, 64, 5, padding=2)
        self.b3_1, self.b3_2, self.b3_3 = ConvBN(cin, 64, 1), ConvBN(64, 96, 3, padding=1), ConvBN(96, 96, 3, padding=1)
        self.bp = ConvBN(cin, pool_features, 1)

    def forward(self, x):
        return torch.cat([self.b1(x), self.b5_2(self.b5_1(x)), self.b3_3(self.b3_2(self.b3_1(x))),
                          self.bp(F.avg_pool2d(x, 3, stride=1, padding=1))], 1)


class ModuleB(nn.Module):
    def __init__(self, cin: int):
        super().__init__()
        self.b3 = ConvBN(cin, 384, 3, stride=2)
        self.bd_1, self.bd_2, self.bd_3 = ConvBN(cin, 64, 1), ConvBN(64, 96, 3, padding=1), ConvBN(96, 96, 3, stride=2)

    def forward(self, x):
        return torch.cat([self.b3(x), self.bd_3(self.bd_2(self.bd_1(x))), F.max_pool2d(x, 3, stride=2)], 1)


class ModuleC(nn.Module):
    def __init__(self, cin: int, c7: int):
        super().__init__()
        self.b1 = ConvBN(cin, 192, 1)
        self.b7 = nn.Sequential(ConvBN(cin, c7, 1), ConvBN(c7, c7, (1, 7), padding=(0, 3)),
                                ConvBN(c7, 192, (7, 1), padding=(3, 0)))
        self.bd = nn.Sequential(ConvBN(cin, c7, 1), ConvBN(c7, c7, (7, 1), padding=(3, 0)),
                                ConvBN(c7, c7, (1, 7), padding=(0, 3)), ConvBN(c7, c7, (7, 1), padding=(3, 0)),
                                ConvBN(c7, 192, (1, 7), padding=(0, 3)))
        self.bp = ConvBN(cin, 192, 1)

    def forward(self, x):
        return torch.cat([self.b1(x), self.b7(x), self.bd(x), self.bp(F.avg_pool2d(x, 3, stride=1, padding=1))], 1)


class ModuleD(nn.Module):
    def __init__(self, cin: int):
        super().__init__()
        self.b3 = nn.Sequential(ConvBN(cin, 192, 1), ConvBN(192, 320, 3, stride=2))
        self.b7 = nn.Sequential(ConvBN(cin, 192, 1), ConvBN(192, 192, (1, 7), padding=(0, 3)),
                                ConvBN(192, 192, (7, 1), padding=(3, 0)), ConvBN(192, 192, 3, stride=2))

    def forward(self, x):
        return torch.cat([self.b3(x), self.b7(x), F.max_pool2d(x, 3, stride=2)], 1)


class ModuleE(nn.Module):
    def __init__(self, cin: int):
        super().__init__()
        self.b1 = ConvBN(cin, 320, 1)
        self.b3_1 = ConvBN(cin, 384, 1)
        self.b3_a, self.b3_b = ConvBN(384, 384, (1, 3), padding=(0, 1)), ConvBN(384, 384, (3, 1), padding=(1, 0))
        self.bd_1, self.bd_2 = ConvBN(cin, 448, 1), ConvBN(448, 384, 3, padding=1)
        self.bd_a, self.bd_b = ConvBN(384, 384, (1, 3), padding=(0, 1)), ConvBN(384, 384, (3, 1), padding=(1, 0))
        self.bp = ConvBN(cin, 192, 1)

    def forward(self, x):
        y3 = self.b3_1(x)
        yd = self.bd_2(self.bd_1(x))
        return torch.cat([self.b1(x), torch.cat([self.b3_a(y3), self.b3_b(y3)], 1),
                          torch.cat([self.bd_a(yd), self.bd_b(yd)], 1),
                          self.bp(F.avg_pool2d(x, 3, stride=1, padding=1))], 1)


class AuxHead(nn.Module):
    def __init__(self, cin: int, num_classes: int):
        super().__init__()
        self.conv0, self.conv1 = ConvBN(cin, 128, 1), ConvBN(128, 768, 5)
        self.fc = nn.Linear(768, num_classes)

    def forward(self, x):
        x = self.conv1(self.conv0(F.avg_pool2d(x, 5, stride=3)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class InceptionV3(nn.Module):
    def __init__(self, num_classes: int = 1000, aux_logits: bool = False, dropout: float = 0.5,
                 in_channels: int = 3):
        super().__init__()
        self.stem = nn.Sequential(
            ConvBN(in_channels, 32, 3, stride=2), ConvBN(32, 32, 3), ConvBN(32, 64, 3, padding=1),
            nn.MaxPool2d(3, stride=2), ConvBN(64, 80, 1), ConvBN(80, 192, 3), nn.MaxPool2d(3, stride=2))
        self.mixed = nn.Sequential(
            ModuleA(192, 32), ModuleA(256, 64), ModuleA(288, 64), ModuleB(288),
            ModuleC(768, 128), ModuleC(768, 160), ModuleC(768, 160), ModuleC(768, 192))
        self.aux = AuxHead(768, num_classes) if aux_logits else None
        self.mixed7 = nn.Sequential(ModuleD(768), ModuleE(1280), ModuleE(2048))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(2048, num_classes)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(m.weight, std=0.1, a=-0.2, b=0.2)

    def forward(self, x):
        x = self.mixed(self.stem(x))
        aux = self.aux(x) if (self.aux is not None and self.training) else None
        x = self.fc(self.dropout(torch.flatten(self.avgpool(self.mixed7(x)), 1)))
        return x if aux is None else (x, aux)


def inception_v3(**kw): return InceptionV3(**kw)
