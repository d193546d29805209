#!/usr/bin/env python3
"""examples/pytorch, step 1: your model in PyTorch, scripted for the devices, its initial weights
for the server.

    python3 model.py OUT_DIR [--seed S]

writes OUT_DIR/fashion_net.pt (TorchScript: what edgefl_torch_device trains and
edgefl_torch_server evaluates) and OUT_DIR/initial.safetensors (the module's named parameters,
F32, with the preprocessing in __metadata__): `edgefl-server --initial-model` starts from it.
Replace FashionNet with your own nn.Module; nothing else here knows its layers.
"""
import argparse
import os

import torch
from torch import nn

from safetensors_io import save_file

# What a caller must do to an image before the model sees it: the same on the devices
# (edgefl::load_fashion_mnist), in the server's evaluation and in evaluate.py.
PREPROCESSING = "Fashion-MNIST pixels scaled to [0, 1], then (x - 0.286) / 0.353; inputs 1x28x28"
MEAN, STD = 0.2860, 0.3530


class FashionNet(nn.Module):
    """A small CNN that is not one of edgefl's built-in models: 5x5 convolutions, two blocks."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(16 * 7 * 7, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    torch.manual_seed(args.seed)
    model = FashionNet()
    torch.jit.script(model).save(os.path.join(args.out_dir, "fashion_net.pt"))
    parameters = dict(model.named_parameters())
    save_file(parameters, os.path.join(args.out_dir, "initial.safetensors"),
              {"preprocessing": PREPROCESSING, "model": "examples/pytorch/model.py:FashionNet"})
    count = sum(p.numel() for p in parameters.values())
    print(f"FashionNet: {len(parameters)} tensors, {count} parameters -> "
          f"{args.out_dir}/fashion_net.pt, {args.out_dir}/initial.safetensors")


if __name__ == "__main__":
    main()
