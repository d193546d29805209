#!/usr/bin/env python3
"""Writes a device's credentials partition (platforms/cortex-m/credentials.h) from PEM files.

    make_credentials.py --server-name localhost --ca ca.crt --cert device.crt --key device.key \
        --out credentials.bin

The PEM files are those `edgefl certs` writes; each holds one object, stored as DER.
"""
import argparse
import base64
import re
import struct
import sys


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def pem_to_der(path: str) -> bytes:
    text = open(path, encoding="ascii").read()
    blocks = re.findall(r"-----BEGIN ([A-Z ]+)-----\s*(.*?)\s*-----END \1-----", text, re.S)
    if len(blocks) != 1:
        sys.exit(f"make_credentials: {path}: expected exactly one PEM block, found {len(blocks)}")
    return base64.b64decode("".join(blocks[0][1].split()), validate=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-name", required=True)
    parser.add_argument("--ca", required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    fields = [args.server_name.encode("ascii"), pem_to_der(args.ca), pem_to_der(args.cert), pem_to_der(args.key)]
    body = b"EFDC" + struct.pack("<5I", 1, *(len(f) for f in fields)) + b"".join(fields)
    with open(args.out, "wb") as out:
        out.write(body + struct.pack("<I", crc32c(body)))


if __name__ == "__main__":
    main()
