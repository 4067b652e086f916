"""dequantize / dequantize_rows / quantize: shape handling and chunking around the family kernels."""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType
from gguf import quants as gguf_quants

from oxigpu.errors import InvalidParameterError, UnsupportedQuantTypeError

from . import floats, iquantize, iquants, kquantize, kquants, legacy
from ._bits import Kernel
from .registry import QuantType, get_type

_DEQUANT: dict[str, Kernel] = {**floats.DEQUANT, **legacy.DEQUANT, **kquants.DEQUANT, **iquants.DEQUANT}
# Types whose gguf-package quantizer gives ggml's reference bytes (up to the sign of a zero f16
# scale or min); F32/F16 are casts.
_GGUF_QUANTIZE = frozenset({"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "TQ1_0", "TQ2_0"})
_QUANTIZE = {**kquantize.QUANTIZE, **iquantize.QUANTIZE}
QUANTIZABLE: frozenset[str] = _GGUF_QUANTIZE | frozenset(_QUANTIZE)

# Elements per chunk: each chunk's temporaries stay in L2 between the few passes of a kernel.
_DEQUANT_CHUNK = 1 << 18
# K-quant quantizers make dozens of passes over each chunk; keep it cache-sized too.
_QUANTIZE_CHUNK = 1 << 18


def _as_bytes(raw: np.ndarray) -> np.ndarray:
    if np.ndim(raw) == 0:
        raise InvalidParameterError("raw tensor data must have at least one dimension")
    raw = np.ascontiguousarray(raw)
    return raw if raw.dtype == np.uint8 else raw.view(np.uint8)


def dequantize(raw: np.ndarray, qtype: int | str | QuantType) -> np.ndarray:
    """Raw ggml bytes (..., row_bytes) -> a new float32 array (..., n_cols).

    Non-uint8 input (e.g. an F32 tensor exposed as float32) is reinterpreted as its bytes.
    """
    qt = get_type(qtype)
    raw = _as_bytes(raw)
    n_cols = qt.n_cols(raw.shape[-1])
    blocks = raw.reshape(-1, qt.type_size)
    out = np.empty((blocks.shape[0], qt.block_size), np.float32)
    kernel = _DEQUANT[qt.name]
    step = max(1, _DEQUANT_CHUNK // qt.block_size)
    for s in range(0, blocks.shape[0], step):
        kernel(blocks[s:s + step], out[s:s + step])
    return out.reshape(raw.shape[:-1] + (n_cols,))


def dequantize_rows(raw2d: np.ndarray, qtype: int | str | QuantType, rows) -> np.ndarray:
    """Dequantize only `rows` of a (n_rows, row_bytes) tensor -> float32 (*rows.shape, n_cols).

    Only the selected rows' bytes are read, so an embedding lookup in a memory-mapped
    262,144-row table costs a few rows, not the table.
    """
    if raw2d.ndim != 2:
        raise InvalidParameterError(f"dequantize_rows wants a 2-D tensor, got shape {raw2d.shape}")
    idx = np.asarray(rows)
    if idx.size == 0:
        idx = idx.astype(np.intp)  # np.asarray([]) is float64
    if idx.dtype.kind not in "iu":
        raise InvalidParameterError(f"row indices must be integers, got {idx.dtype}")
    n_rows = raw2d.shape[0]
    if idx.size and (idx.min() < 0 or idx.max() >= n_rows):
        bad = idx[(idx < 0) | (idx >= n_rows)].flat[0]
        raise IndexError(f"row {bad} out of range for a tensor of {n_rows} rows")
    return dequantize(raw2d[idx.astype(np.intp)], qtype)


def quantize(x: np.ndarray, qtype: int | str | QuantType) -> np.ndarray:
    """float32 (..., n) -> ggml bytes uint8 (..., row_bytes); n must be a multiple of the block size.

    Legacy, ternary and float types use the gguf package (ggml's reference arithmetic); the K-quants and
    IQ4_NL/IQ4_XS use our vectorized copies of ggml's reference quantizers, byte-identical to them. The
    other IQ types are dequantize-only (their files come from llama.cpp's quantizer).
    """
    qt = get_type(qtype)
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 0:
        raise InvalidParameterError("quantize wants at least one dimension")
    row_bytes = qt.row_bytes(x.shape[-1])
    if qt.name not in QUANTIZABLE:
        raise UnsupportedQuantTypeError(
            f"cannot quantize to {qt.name} (dequantize only); quantizable: {', '.join(sorted(QUANTIZABLE))}")
    if qt.is_block and not np.isfinite(x).all():
        raise InvalidParameterError(f"cannot quantize non-finite values to {qt.name}")
    if qt.name in _GGUF_QUANTIZE:
        q = gguf_quants.quantize(np.ascontiguousarray(x), GGMLQuantizationType(qt.ggml_type))
        if np.may_share_memory(q, x):  # F32 "quantization" is the identity; never alias the input
            q = q.copy()
        return np.ascontiguousarray(q).view(np.uint8).reshape(x.shape[:-1] + (row_bytes,))
    blocks = np.ascontiguousarray(x).reshape(-1, qt.block_size)
    out = np.empty((blocks.shape[0], qt.type_size), np.uint8)
    fn = _QUANTIZE[qt.name]
    step = max(1, _QUANTIZE_CHUNK // qt.block_size)
    with np.errstate(all="ignore"):  # masked-out groups divide by zero, exactly as C would
        for s in range(0, blocks.shape[0], step):
            out[s:s + step] = fn(blocks[s:s + step])
    return out.reshape(x.shape[:-1] + (row_bytes,))
