"""DenseNet-BC (Huang et al. 2017, "Densely connected convolutional networks"), written for memplan.

A dense layer is BN-ReLU-conv1x1 (bn_size * growth channels) - BN-ReLU-conv3x3 (growth channels).
Each layer here returns ``cat([x, new_features])``: the input of layer i of a block is the
concatenation of the block input and the i-1 earlier outputs, in that order, which is exactly the
tensor a DenseNet feeds to its i-th layer. Writing it this way (rather than keeping a Python list of
all earlier outputs) gives one chain stage per dense layer after linearization, with the same
arithmetic and the same parameters. Transitions are BN-ReLU-conv1x1 (halving channels) - avgpool 2.

Configurations (growth, blocks, initial features): 121 (32, 6-12-24-16, 64), 161 (48, 6-12-36-24, 96),
169 (32, 6-12-32-32, 64), 201 (32, 6-12-48-32, 64). Parameter counts with 1000 classes:
7,978,856 / 28,681,000 / 14,149,480 / 20,013,928 (checked by the tests).
"""
from __future__ import annotations

import torch
from torch import nn


class DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int, bn_size: int = 4):
        super().__init__()
        self.bn1, self.conv1 = nn.BatchNorm2d(cin), nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(bn_size * growth)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)
        self.relu = nn.ReLU()

    def forward(self, x):
        y = self.conv1(self.relu(self.bn1(x)))
        y = self.conv2(self.relu(self.bn2(y)))
        return torch.cat([x, y], 1)


class Transition(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.bn, self.relu = nn.BatchNorm2d(cin), nn.ReLU()
        self.conv = nn.Conv2d(cin, cout, 1, bias=False)
        self.pool = nn.AvgPool2d(2, stride=2)

    def forward(self, x):
        return self.pool(self.conv(self.relu(self.bn(x))))


class DenseNet(nn.Module):
    def __init__(self, growth: int, blocks, init_features: int, bn_size: int = 4, num_classes: int = 1000,
                 in_channels: int = 3):
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv2d(in_channels, init_features, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(init_features), nn.ReLU(), nn.MaxPool2d(3, stride=2, padding=1)]
        c = init_features
        for i, n in enumerate(blocks):
            for _ in range(n):
                layers.append(DenseLayer(c, growth, bn_size))
                c += growth
            if i != len(blocks) - 1:
                layers.append(Transition(c, c // 2))
                c //= 2
        layers += [nn.BatchNorm2d(c), nn.ReLU()]
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(c, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def densenet121(**kw): return DenseNet(32, (6, 12, 24, 16), 64, **kw)
def densenet161(**kw): return DenseNet(48, (6, 12, 36, 24), 96, **kw)
def densenet169(**kw): return DenseNet(32, (6, 12, 32, 32), 64, **kw)
def densenet201(**kw): return DenseNet(32, (6, 12, 48, 32), 64, **kw)
