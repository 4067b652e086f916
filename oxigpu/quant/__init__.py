"""Quant-type registry: ggml block layouts, numpy (de)quantization, WGSL snippet names.

    from oxigpu.quant import QuantType, get_type, TYPES, SUPPORTED, dequantize, dequantize_rows, quantize

The numpy dequantizers are bit-identical to gguf.quants.dequantize (same float32 operation
order, or gguf.quants itself for the grid and ternary types); the K-quant quantizers are
byte-identical to ggml's reference quantizers. `samples.random_blocks` makes test tensors of any type.
"""
from __future__ import annotations

from .codec import QUANTIZABLE, dequantize, dequantize_rows, quantize
from .registry import SUPPORTED, TYPES, QuantType, get_type

__all__ = ["QuantType", "get_type", "TYPES", "SUPPORTED", "QUANTIZABLE", "dequantize", "dequantize_rows",
           "quantize"]
