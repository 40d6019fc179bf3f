#!/usr/bin/env python3
"""Write tests/golden/small.safetensors with a writer independent of fsc (plain struct + json).

The layout follows the safetensors format (https://github.com/huggingface/safetensors): an 8-byte
little-endian header length, a JSON header padded with spaces to a multiple of 8 bytes, then the data.
The data is deliberately stored in an order different from the header's key order, and contains an
empty tensor and a 0-dimensional scalar. tests/test_safetensors.c checks the values written here.
Not run by the test suite; run it by hand if the golden file must change:
    python3 tests/gen_golden_safetensors.py tests/golden/small.safetensors
"""
import json
import struct
import sys


def f32(values):
    return b"".join(struct.pack("<f", v) for v in values)


def bf16(values):  # exact for these values: truncation of the float32 bits
    return b"".join(struct.pack("<H", struct.unpack("<I", struct.pack("<f", v))[0] >> 16) for v in values)


def f16(values):  # struct's IEEE half format
    return b"".join(struct.pack("<e", v) for v in values)


tensors = [  # (name, dtype, shape, bytes), in data order
    ("e.u8", "U8", [1, 2, 1, 3], bytes([0, 1, 2, 3, 4, 255])),
    ("c.f16", "F16", [2, 2], f16([1.0, -2.0, 0.5, 65504.0])),
    ("a.f32", "F32", [2, 3], f32([0.0, 1.0, -2.5, 0.1, 1e-30, 65504.0])),
    ("f.empty", "F32", [0, 3], b""),
    ("d.i32", "I32", [], struct.pack("<i", -123456789)),
    ("b.bf16", "BF16", [4], bf16([1.0, -2.0, 0.5, 3.0])),
]

header = {"__metadata__": {"format": "pt", "source": "gen_golden_safetensors.py"}}
data = b""
for name, dtype, shape, raw in tensors:
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
    data += raw
text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
text += b" " * ((8 - len(text) % 8) % 8)
with open(sys.argv[1] if len(sys.argv) > 1 else "tests/golden/small.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + data)
