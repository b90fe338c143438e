"""VGG 16 and 19 (Simonyan and Zisserman 2015, configurations D and E, no batch norm), written for
memplan: 3x3 convolutions with bias and ReLU, 2x2 max-pools, a 7x7 adaptive average pool and the
4096-4096-classes classifier with dropout. Parameter counts with 1000 classes: 138,357,544 (16) and
143,667,240 (19), checked by the tests.
"""
from __future__ import annotations

import torch
from torch import nn

_CFG = {
    16: (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"),
    19: (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
         512, 512, 512, 512, "M"),
}


class VGG(nn.Module):
    def __init__(self, depth: int, num_classes: int = 1000, in_channels: int = 3, dropout: float = 0.5):
        super().__init__()
        layers: list[nn.Module] = []
        c = in_channels
        for v in _CFG[depth]:
            if v == "M":
                layers.append(nn.MaxPool2d(2, stride=2))
            else:
                layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU()]
                c = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(7)
        self.classifier = nn.Sequential(
            nn.Linear(512 * 49, 4096), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(dropout), nn.Linear(4096, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def vgg16(**kw): return VGG(16, **kw)
def vgg19(**kw): return VGG(19, **kw)
