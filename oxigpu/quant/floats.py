"""Dequantizers for the unquantized element types F32, F16 and BF16 (block size 1)."""
from __future__ import annotations

import numpy as np

from ._bits import Kernel


def f32(blocks: np.ndarray, out: np.ndarray) -> None:
    out[...] = blocks.view(np.float32)


def f16(blocks: np.ndarray, out: np.ndarray) -> None:
    out[...] = blocks.view(np.float16)


def bf16(blocks: np.ndarray, out: np.ndarray) -> None:
    """bf16 is the top half of an f32: shift the 16 bits into place."""
    bits = out.view(np.uint32)
    bits[...] = blocks.view(np.uint16)
    bits <<= np.uint32(16)


DEQUANT: dict[str, Kernel] = {"F32": f32, "F16": f16, "BF16": bf16}
