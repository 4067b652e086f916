"""Dequantizers for the non-linear 4-bit types IQ4_NL (32-blocks) and IQ4_XS (256-blocks).

Both map each 4-bit index through ggml's fixed codebook `kvalues_iq4nl`.
  IQ4_NL  d | qs[16]                      (element j: low nibble of qs[j], j + 16: high nibble)
  IQ4_XS  d | scales_h (u16) | scales_l[4] | qs[128]   (8 sub-blocks of 32, 6-bit scales offset 32)
"""
from __future__ import annotations

import numpy as np

from ._bits import Kernel, bit_planes, f16_field, scale_into

KVALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)


def iq4_nl(blocks: np.ndarray, out: np.ndarray) -> None:
    idx = bit_planes(blocks[:, 2:], 4).reshape(-1, 32)
    scale_into(out, KVALUES[idx], f16_field(blocks, 0))


def iq4_xs(blocks: np.ndarray, out: np.ndarray) -> None:
    n = blocks.shape[0]
    low = bit_planes(blocks[:, 4:8], 4).transpose(0, 2, 1).reshape(n, 8)
    high = bit_planes(blocks[:, 2:4], 2).transpose(0, 2, 1).reshape(n, 8)
    idx = bit_planes(blocks[:, 8:].reshape(n, 8, 16), 4).reshape(n, 8, 32)
    sc = (low | (high << np.uint8(4))).view(np.int8) - np.int8(32)
    dl = f16_field(blocks, 0) * sc.astype(np.float32)
    scale_into(out, KVALUES[idx], dl[:, :, None])


DEQUANT: dict[str, Kernel] = {"IQ4_NL": iq4_nl, "IQ4_XS": iq4_xs}
