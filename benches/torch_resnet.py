"""ResNet-50 in plain torch.nn (torchvision's `resnet50` layout, so that torchvision is not
needed), and the training step the benchmarks time: the same model as
`examples/src/resnet.rs` (a 7x7/2 stem, 3x3/2 max pooling, bottleneck blocks [3, 4, 6, 3] with
the stride on the 3x3 convolution, batch norm after every bias-free convolution, adaptive
average pooling, a linear layer), SGD without momentum, cross-entropy; bf16 through
`torch.autocast` as PyTorch users train (f32 master weights, bf16 convolutions and products,
the loss in f32).

Used by `torch_rows.py` (the `bench` row) and `torch_ddp.py` (weak scaling).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

RESNET50_BLOCKS = (3, 4, 6, 3)
WIDTHS = (64, 128, 256, 512)
EXPANSION = 4


class Bottleneck(nn.Module):
    def __init__(self, c_in, width, stride):
        super().__init__()
        c_out = width * EXPANSION
        self.conv1 = nn.Conv2d(c_in, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, c_out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c_out)
        self.down = None
        if stride != 1 or c_in != c_out:
            self.down = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        shortcut = x if self.down is None else self.down(x)
        h = F.relu(self.bn1(self.conv1(x)), inplace=True)
        h = F.relu(self.bn2(self.conv2(h)), inplace=True)
        return F.relu(self.bn3(self.conv3(h)) + shortcut, inplace=True)


class ResNet(nn.Module):
    def __init__(self, blocks=RESNET50_BLOCKS, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True))
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        layers, c_in = [], 64
        for stage, (count, width) in enumerate(zip(blocks, WIDTHS)):
            for block in range(count):
                layers.append(Bottleneck(c_in, width, 2 if stage > 0 and block == 0 else 1))
                c_in = width * EXPANSION
        self.blocks = nn.Sequential(*layers)
        self.head = nn.Linear(c_in, classes)

    def forward(self, x):
        h = self.blocks(self.pool(self.stem(x)))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


def synthetic_batch(batch, side, classes, device, seed):
    """Images uniform in [-1, 1) from `seed` and labels `i * 7 + 3 mod classes`."""
    g = torch.Generator(device=device).manual_seed(seed)
    images = torch.rand([batch, 3, side, side], generator=g, device=device) * 2 - 1
    labels = (torch.arange(batch, device=device) * 7 + 3) % classes
    return images, labels


def sgd_step(model, images, labels, bf16, lr=0.01, compiled=False):
    """The closure of one training step of `model` (already on the device) on the fixed
    batch: forward (under bf16 autocast when `bf16`), cross-entropy, backward, SGD; returns
    the loss. `compiled`: the forward through `torch.compile` (its backward is compiled too)."""
    forward = torch.compile(model) if compiled else model
    sgd = torch.optim.SGD(model.parameters(), lr=lr)
    device_type = images.device.type

    def step():
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(forward(images), labels)
        sgd.zero_grad(set_to_none=True)
        loss.backward()
        sgd.step()
        return loss.detach()

    return step
