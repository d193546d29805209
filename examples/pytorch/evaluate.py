#!/usr/bin/env python3
"""examples/pytorch, last step: the federated model back in your nn.Module, evaluated by PyTorch.

    python3 evaluate.py GLOBAL_SAFETENSORS [--data DIR] [--expect ACCURACY]

loads edgefl-server's global.safetensors into FashionNet with load_state_dict(strict=True) (the
same names and shapes as the module's parameters), evaluates it on the Fashion-MNIST test set and
prints the accuracy. With --expect (the server's own evaluation of that version), exits 1 unless
the two agree to the fourth digit.
"""
import argparse
import gzip
import os
import struct
import sys

import torch

from model import MEAN, STD, FashionNet
from safetensors_io import load_file


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def find(directory, name):
    for candidate in (name, name + ".gz"):
        path = os.path.join(directory, candidate)
        if os.path.exists(path):
            return path
    sys.exit(f"evaluate.py: no {name}[.gz] in {directory}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--data", default=os.environ.get("EDGEFL_FASHION_MNIST_DIR",
                                                         "/usr/share/datasets/fashion-mnist"))
    parser.add_argument("--expect", type=float)
    args = parser.parse_args()

    state, metadata = load_file(args.model)
    model = FashionNet()
    model.load_state_dict(state, strict=True)
    model.eval()
    images = read_idx(find(args.data, "t10k-images-idx3-ubyte")).to(torch.float32)
    labels = read_idx(find(args.data, "t10k-labels-idx1-ubyte")).to(torch.int64)
    inputs = ((images / 255.0 - MEAN) / STD).unsqueeze(1)
    with torch.no_grad():
        correct = sum(int((model(inputs[i:i + 1000]).argmax(1) == labels[i:i + 1000]).sum())
                      for i in range(0, len(labels), 1000))
    accuracy = correct / len(labels)
    print(f"{args.model}: round {metadata.get('edgefl.round')}, model version "
          f"{metadata.get('edgefl.model_version')}; preprocessing: {metadata.get('preprocessing')}")
    print(f"PyTorch test accuracy: {accuracy:.4f} ({correct}/{len(labels)})")
    if args.expect is not None:
        print(f"edgefl-server's evaluation: {args.expect:.4f}")
        if round(accuracy, 4) != round(args.expect, 4):
            sys.exit("evaluate.py: PyTorch and the server disagree")


if __name__ == "__main__":
    main()
