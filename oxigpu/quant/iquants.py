"""Dequantizers for the non-linear (IQ) and ternary (TQ) types, and the lookup grids the GPU reads.

IQ4_NL and IQ4_XS map each 4-bit index through ggml's 16-entry codebook `kvalues_iq4nl` (hand-written
here, vectorized in the style of the other families). The grid types (IQ1, IQ2, IQ3) and the ternary
ones use `gguf.quants`' own dequantizers, which hold ggml's grids: bit-exact with it by construction.

Layouts (ggml-common.h, byte order; "grid g" = an entry of ggml's table of 8 or 4 byte values):
  IQ4_NL  d | qs[16]                    element j: low nibble of qs[j], j + 16: high nibble
  IQ4_XS  d | scales_h u16 | scales_l[4] | qs[128]    8 sub-blocks of 32, 6-bit scales offset 32
  IQ2_XXS d | 8 x (4 grid bytes | u32: 4 x 7-bit sign index, 4-bit scale)      iq2xxs_grid[256]
  IQ2_XS  d | qs u16[32] (9-bit grid, 7-bit sign index) | scales[8] (4 bits per 16)   iq2xs_grid[512]
  IQ2_S   d | qs[32] grid low | signs[32] | qh[8] (2 bits per 8) | scales[8]          iq2s_grid[1024]
  IQ3_XXS d | qs[64] grid | 8 x u32 (4 x 7-bit sign index, 4-bit scale)           iq3xxs_grid[256] (4 bytes)
  IQ3_S   d | qs[64] grid low | qh[8] | signs[32] | scales[4]                      iq3s_grid[512] (4 bytes)
  IQ1_S   d | qs[32] grid low | qh u16[8] (3 high bits per 8, 3-bit scale, delta sign)  iq1s_grid[2048]
  IQ1_M   qs[32] | qh[16] (3 high bits and a delta sign per 8) | scales u16[4] (3-bit scales; the
          f16 d in their top nibbles)                                          iq1s_grid[2048]
  TQ1_0   qs[48] | qh[4] (5 and 4 base-3 digits per byte, scaled by 256/243) | d
  TQ2_0   qs[64] (2 bits per element, value - 1) | d
The sign index s (7 bits) stands for the byte s | parity(s) << 7 (ggml's ksigns_iq2xs): bit j negates
element j of the 8.
"""
from __future__ import annotations

import numpy as np
from gguf import quants as gguf_quants

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


_GGUF = {"IQ2_XXS": gguf_quants.IQ2_XXS, "IQ2_XS": gguf_quants.IQ2_XS, "IQ2_S": gguf_quants.IQ2_S,
         "IQ3_XXS": gguf_quants.IQ3_XXS, "IQ3_S": gguf_quants.IQ3_S, "IQ1_S": gguf_quants.IQ1_S,
         "IQ1_M": gguf_quants.IQ1_M, "TQ1_0": gguf_quants.TQ1_0, "TQ2_0": gguf_quants.TQ2_0}


def _via_gguf(cls: type) -> Kernel:
    def kernel(blocks: np.ndarray, out: np.ndarray) -> None:
        cls.init_grid()
        with np.errstate(all="ignore"):     # NaN/inf scales propagate as in ggml
            out[...] = cls.dequantize_blocks(blocks)
    kernel.__name__ = cls.__name__.lower()
    return kernel


DEQUANT: dict[str, Kernel] = {"IQ4_NL": iq4_nl, "IQ4_XS": iq4_xs,
                              **{name: _via_gguf(cls) for name, cls in _GGUF.items()}}

GRID_TYPES = ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M")
"""Types whose elements come from a lookup grid."""
TABLE_TYPES = (*GRID_TYPES, "IQ4_NL", "IQ4_XS")
"""Types whose WGSL snippets read a lookup table (``table_words``)."""


def table_words(qtype: str) -> np.ndarray:
    """The lookup table the WGSL snippet of ``qtype`` reads, as little-endian u32 words.

    Grid types: ggml's grid (``iq2xxs_grid`` ...), entry i at words [i * E, (i + 1) * E) (E = 2 for
    8-byte entries, 1 for 4-byte ones), each byte one element as int8 (the IQ1 grids hold -1, 0, 1), from
    gguf.quants' own copy. IQ4_NL/IQ4_XS: for every byte b of packed nibbles, word b holds
    kvalues[b & 15] in byte 0 and kvalues[b >> 4] in byte 2 (as int8; bytes 1 and 3 zero), so two
    lookups and a few shifts give eight values packed four to a word."""
    if qtype in ("IQ4_NL", "IQ4_XS"):
        kv = KVALUES.astype(np.int8).view(np.uint8).astype(np.uint32)
        b = np.arange(256)
        return (kv[b & 15] | (kv[b >> 4] << 16)).astype(np.uint32)
    if qtype not in GRID_TYPES:
        raise KeyError(f"{qtype} has no lookup table")
    cls = _GGUF[qtype]
    cls.init_grid()
    vals = np.asarray(cls.grid, np.float32).reshape(cls.grid_shape)
    assert (vals == np.round(vals)).all() and vals.min() >= -128 and vals.max() <= 127
    return np.ascontiguousarray(vals.astype(np.int8)).view(np.uint32).reshape(-1).copy()
