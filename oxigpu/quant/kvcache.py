"""KV-cache types (llama.cpp's ``-ctk/-ctv``): f16 (the default), q8_0 and q4_0.

A cache row of ``width`` values is stored as ggml stores a tensor row of that type: f16 halves, or blocks of
32 values each with an f16 scale d (q8_0: 32 int8s, value d * q; q4_0: 16 bytes of nibbles, value j in the
low nibble of byte j and value j + 16 in its high one, value d * (q - 8)). Quantization is ggml's reference
arithmetic (``quantize_row_q8_0_ref`` / ``quantize_row_q4_0_ref``, via the gguf package), which the WGSL
store kernels repeat operation for operation, so both backends store the same bytes.

Quantized rows must be whole 4-byte words for the GPU (blocks are 34 or 18 bytes: an even number of blocks
per row), so their width must be a multiple of 64 (any head dim of 64, 128, 256 ...).
"""
from __future__ import annotations

import numpy as np
from gguf import quants as gguf_quants

from ..errors import InvalidParameterError

KV_TYPES = ("f16", "q8_0", "q4_0")
"""The cache types, default first."""

BLOCK = 32
BLOCK_BYTES = {"q8_0": 34, "q4_0": 18}
_GGUF = {"q8_0": gguf_quants.Q8_0, "q4_0": gguf_quants.Q4_0}


def check_type(name, what: str = "cache type") -> str:
    """``name`` as one of :data:`KV_TYPES` (case-insensitive), else InvalidParameterError listing them."""
    if isinstance(name, str) and name.lower() in KV_TYPES:
        return name.lower()
    raise InvalidParameterError(f"{what} must be one of {', '.join(KV_TYPES)}; got {name!r}")


def check_width(kind: str, width: int) -> None:
    """InvalidParameterError unless a cache row of ``width`` values can be stored as ``kind``."""
    if kind != "f16" and width % (2 * BLOCK):
        raise InvalidParameterError(
            f"a {kind} KV cache needs rows of a multiple of {2 * BLOCK} values (whole 4-byte words of "
            f"{BLOCK}-value blocks); this model's row has {width}: use cache type f16")


def row_bytes(kind: str, width: int) -> int:
    """Bytes of one cache row of ``width`` values."""
    if kind == "f16":
        return 2 * width
    return width // BLOCK * BLOCK_BYTES[kind]


def quantize_rows(x: np.ndarray, kind: str) -> np.ndarray:
    """f32 rows [n, width] -> the cache's bytes [n, row_bytes] (uint8; f16 as its raw halves)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if kind == "f16":
        return x.astype(np.float16).view(np.uint8)
    n, w = x.shape
    with np.errstate(all="ignore"):       # an all-zero block divides by zero exactly as ggml does
        q = _GGUF[kind].quantize_blocks(x.reshape(-1, BLOCK))
    return np.ascontiguousarray(q, dtype=np.uint8).reshape(n, row_bytes(kind, w))


def dequantize_rows(raw: np.ndarray, kind: str, width: int) -> np.ndarray:
    """The cache's bytes [n, row_bytes] -> f32 rows [n, width] (exactly: every stored value is an f32)."""
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    n = raw.shape[0]
    if kind == "f16":
        return raw.view(np.float16).astype(np.float32).reshape(n, width)
    blocks = raw.reshape(-1, BLOCK_BYTES[kind])
    return _GGUF[kind].dequantize_blocks(blocks).astype(np.float32, copy=False).reshape(n, width)
