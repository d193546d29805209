"""Reads and writes .safetensors files (https://huggingface.co/docs/safetensors) with torch alone.

Debian 12 has no python3-safetensors; the format is an 8-byte little-endian header length, a JSON
header {"__metadata__": {...}, name: {"dtype", "shape", "data_offsets": [begin, end]}, ...} and
the tensors' bytes. These two functions do what safetensors.torch.save_file / load_file do for
F32, F16 and BF16 tensors.
"""
import json
import struct

import torch

_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
_NAMES = {v: k for k, v in _DTYPES.items()}


def save_file(tensors, path, metadata=None):
    """Writes {name: tensor} in the order given (the order edgefl keeps as its flat vector)."""
    header = {"__metadata__": dict(metadata or {})}
    blobs, offset = [], 0
    for name, tensor in tensors.items():
        t = tensor.detach().contiguous().cpu()
        if t.dtype not in _NAMES:
            raise ValueError(f"{name}: dtype {t.dtype} is not F32, F16 or BF16")
        raw = t.view(torch.uint8).numpy().tobytes() if t.dim() > 0 else t.reshape(1).view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def load_file(path):
    """Returns ({name: float32 tensor}, metadata)."""
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    body = data[8 + length:]
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        flat = torch.frombuffer(bytearray(body[begin:end]), dtype=_DTYPES[entry["dtype"]])
        tensors[name] = flat.reshape(entry["shape"]).to(torch.float32)
    return tensors, metadata
