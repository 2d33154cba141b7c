"""ResNet-18 (torchvision layout, random init, eval mode) and its BasicBlock (M4)."""

from __future__ import annotations

import torch
from torch import nn


def _conv_bn(cin: int, cout: int, kernel: int, stride: int) -> list[nn.Module]:
    conv = nn.Conv2d(cin, cout, kernel, stride, padding=kernel // 2, bias=False)
    return [conv, nn.BatchNorm2d(cout)]


class BasicBlock(nn.Module):
    """``relu(bn(conv(relu(bn(conv(x))))) + shortcut(x))``."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.body = nn.Sequential(
            *_conv_bn(cin, cout, 3, stride), nn.ReLU(), *_conv_bn(cout, cout, 3, 1)
        )
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(*_conv_bn(cin, cout, 1, stride))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the block to ``x [N, C, H, W]``."""
        return torch.relu(self.body(x) + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18 with a configurable base width (64 is the real one)."""

    def __init__(self, width: int = 64, classes: int = 1000) -> None:
        super().__init__()
        w = width
        self.stem = nn.Sequential(
            *_conv_bn(3, w, 7, 2), nn.ReLU(), nn.MaxPool2d(3, stride=2, padding=1)
        )
        stages = []
        for cin, cout, stride in ((w, w, 1), (w, 2 * w, 2), (2 * w, 4 * w, 2), (4 * w, 8 * w, 2)):
            stages += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout)]
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(8 * w, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``[N, classes]`` for images ``x [N, 3, H, W]``."""
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def randomize_batchnorm(module: nn.Module) -> None:
    """Give BatchNorm layers non-trivial running stats and affine terms (eval mode)."""
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            assert m.running_mean is not None and m.running_var is not None
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.1, 0.1)
