"""ResNet (He et al. 2016, "Deep residual learning") and pre-activation ResNet (He et al. 2016,
"Identity mappings in deep residual networks"), written for memplan.

Post-activation ResNet 18/34 use basic blocks (two 3x3 convolutions), 50/101/152 bottleneck blocks
(1x1, 3x3, 1x1 with expansion 4, stride on the 3x3). The shortcut is a 1x1 convolution + batch norm
when the shape changes. With 1000 classes the parameter counts are those usually quoted for these
networks (ResNet-50: 25,557,032), which the tests check.

Pre-activation networks put BN and ReLU before each convolution. ``preact_resnet200`` is the
ImageNet-style bottleneck net with blocks (3, 24, 36, 3); ``preact_resnet1001`` is the CIFAR-style
bottleneck net of the identity-mappings paper: a 3x3 stem with 16 channels, three stages of
n = (1001 - 2) / 9 = 111 bottleneck blocks with output widths 64, 128, 256 (strides 1, 2, 2), then
BN-ReLU, global average pooling and a linear classifier (10 classes by default).

No ReLU is in-place: the runtime executor feeds each stage a detached leaf tensor, on which an
in-place operation would be an error.
"""
from __future__ import annotations

import torch
from torch import nn


def _conv3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def _conv1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


def _projection(cin: int, cout: int, stride: int) -> nn.Module | None:
    """The post-activation shortcut: 1x1 convolution + BN when the shape changes, identity (None) otherwise."""
    if stride != 1 or cin != cout:
        return nn.Sequential(_conv1(cin, cout, stride), nn.BatchNorm2d(cout))
    return None


class _PostActBlock(nn.Module):
    """What post-activation blocks share: ``relu`` and ``shortcut`` set by the subclass, and the
    residual join ``relu(y + shortcut(x))``."""

    def _join(self, x, y):
        s = x if self.shortcut is None else self.shortcut(x)
        return self.relu(y + s)


class BasicBlock(_PostActBlock):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int = 1):
        super().__init__()
        cout = width * self.expansion
        self.conv1, self.bn1 = _conv3(cin, width, stride), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = _conv3(width, cout), nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.shortcut = _projection(cin, cout, stride)

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        return self._join(x, self.bn2(self.conv2(y)))


class Bottleneck(_PostActBlock):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1):
        super().__init__()
        cout = width * self.expansion
        self.conv1, self.bn1 = _conv1(cin, width), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = _conv3(width, width, stride), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = _conv1(width, cout), nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.shortcut = _projection(cin, cout, stride)

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        return self._join(x, self.bn3(self.conv3(y)))


class ResNet(nn.Module):
    """ImageNet ResNet: 7x7/2 stem, 3x3/2 max-pool, four stages (64, 128, 256, 512 widths), classifier."""

    def __init__(self, block, layers, num_classes: int = 1000, in_channels: int = 3):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        cin = 64
        stages = []
        for i, (width, n) in enumerate(zip((64, 128, 256, 512), layers)):
            blocks = []
            for j in range(n):
                blocks.append(block(cin, width, 2 if (j == 0 and i > 0) else 1))
                cin = width * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)
        _init(self)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class PreActBottleneck(nn.Module):
    """BN-ReLU-conv1x1, BN-ReLU-conv3x3 (stride), BN-ReLU-conv1x1; the projection shortcut (when the
    shape changes) takes the first BN-ReLU output, as in the identity-mappings paper."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1):
        super().__init__()
        cout = width * self.expansion
        self.bn1, self.conv1 = nn.BatchNorm2d(cin), _conv1(cin, width)
        self.bn2, self.conv2 = nn.BatchNorm2d(width), _conv3(width, width, stride)
        self.bn3, self.conv3 = nn.BatchNorm2d(width), _conv1(width, cout)
        self.relu = nn.ReLU()
        self.shortcut = _conv1(cin, cout, stride) if (stride != 1 or cin != cout) else None

    def forward(self, x):
        p = self.relu(self.bn1(x))
        s = x if self.shortcut is None else self.shortcut(p)
        y = self.conv1(p)
        y = self.conv2(self.relu(self.bn2(y)))
        y = self.conv3(self.relu(self.bn3(y)))
        return y + s


class PreActResNet(nn.Module):
    """ImageNet pre-activation ResNet (7x7 stem, four bottleneck stages, final BN-ReLU)."""

    def __init__(self, layers, num_classes: int = 1000, in_channels: int = 3):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        cin, stages = 64, []
        for i, (width, n) in enumerate(zip((64, 128, 256, 512), layers)):
            blocks = []
            for j in range(n):
                blocks.append(PreActBottleneck(cin, width, 2 if (j == 0 and i > 0) else 1))
                cin = width * 4
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.bn_final = nn.BatchNorm2d(cin)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)
        _init(self)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = self.relu(self.bn_final(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class PreActResNetCifar(nn.Module):
    """CIFAR pre-activation bottleneck ResNet of depth 9n+2 (1001 -> n = 111)."""

    def __init__(self, depth: int = 1001, num_classes: int = 10, in_channels: int = 3):
        super().__init__()
        if (depth - 2) % 9:
            raise ValueError(f"depth {depth} is not of the form 9n+2")
        n = (depth - 2) // 9
        self.conv1 = _conv3(in_channels, 16)
        cin, stages = 16, []
        for i, width in enumerate((16, 32, 64)):
            blocks = []
            for j in range(n):
                blocks.append(PreActBottleneck(cin, width, 2 if (j == 0 and i > 0) else 1))
                cin = width * 4
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3 = stages
        self.bn_final = nn.BatchNorm2d(cin)
        self.relu = nn.ReLU()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)
        _init(self)

    def forward(self, x):
        x = self.layer3(self.layer2(self.layer1(self.conv1(x))))
        x = self.relu(self.bn_final(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _init(model: nn.Module) -> None:
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def resnet18(**kw): return ResNet(BasicBlock, (2, 2, 2, 2), **kw)
def resnet34(**kw): return ResNet(BasicBlock, (3, 4, 6, 3), **kw)
def resnet50(**kw): return ResNet(Bottleneck, (3, 4, 6, 3), **kw)
def resnet101(**kw): return ResNet(Bottleneck, (3, 4, 23, 3), **kw)
def resnet152(**kw): return ResNet(Bottleneck, (3, 8, 36, 3), **kw)
def preact_resnet200(**kw): return PreActResNet((3, 24, 36, 3), **kw)
def preact_resnet1001(**kw): return PreActResNetCifar(1001, **kw)
