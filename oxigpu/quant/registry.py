"""The quant-type registry: block layout facts for every ggml type oxigpu can read.

`QuantType` is plain data (hashable, comparable) so graphs, pipeline caches and
tests can key on it; the numpy kernels live in the family modules and are looked
up by name in `codec`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oxigpu.errors import InvalidParameterError, UnsupportedQuantTypeError


@dataclass(frozen=True)
class QuantType:
    """One ggml tensor type: `block_size` elements are stored in `type_size` bytes."""

    name: str
    ggml_type: int  # same numbering as gguf.GGMLQuantizationType
    block_size: int
    type_size: int

    @property
    def bits_per_weight(self) -> float:
        return self.type_size * 8 / self.block_size

    @property
    def is_block(self) -> bool:
        """True for block-quantized types (a row must be a multiple of `block_size`)."""
        return self.block_size > 1

    @property
    def wgsl_file(self) -> str:
        """File name of this type's WGSL dequant snippet under `oxigpu/shaders/quant/`."""
        return f"{self.name.lower()}.wgsl"

    def row_bytes(self, n_cols: int) -> int:
        """Bytes of one row of `n_cols` elements; the row must hold whole blocks."""
        if n_cols < 0 or n_cols % self.block_size:
            raise InvalidParameterError(
                f"{self.name}: row length {n_cols} is not a multiple of the block size {self.block_size}")
        return n_cols // self.block_size * self.type_size

    def n_cols(self, row_bytes: int) -> int:
        """Elements in a row of `row_bytes` bytes (the inverse of `row_bytes`)."""
        if row_bytes < 0 or row_bytes % self.type_size:
            raise InvalidParameterError(
                f"{self.name}: {row_bytes} bytes per row is not a multiple of the block's {self.type_size} bytes")
        return row_bytes // self.type_size * self.block_size


_ALL = (
    QuantType("F32", 0, 1, 4),
    QuantType("F16", 1, 1, 2),
    QuantType("Q4_0", 2, 32, 18),
    QuantType("Q4_1", 3, 32, 20),
    QuantType("Q5_0", 6, 32, 22),
    QuantType("Q5_1", 7, 32, 24),
    QuantType("Q8_0", 8, 32, 34),
    QuantType("Q2_K", 10, 256, 84),
    QuantType("Q3_K", 11, 256, 110),
    QuantType("Q4_K", 12, 256, 144),
    QuantType("Q5_K", 13, 256, 176),
    QuantType("Q6_K", 14, 256, 210),
    QuantType("IQ2_XXS", 16, 256, 66),
    QuantType("IQ2_XS", 17, 256, 74),
    QuantType("IQ3_XXS", 18, 256, 98),
    QuantType("IQ1_S", 19, 256, 50),
    QuantType("IQ4_NL", 20, 32, 18),
    QuantType("IQ3_S", 21, 256, 110),
    QuantType("IQ2_S", 22, 256, 82),
    QuantType("IQ4_XS", 23, 256, 136),
    QuantType("IQ1_M", 29, 256, 56),
    QuantType("BF16", 30, 1, 2),
    QuantType("TQ1_0", 34, 256, 54),
    QuantType("TQ2_0", 35, 256, 66),
)

TYPES: dict[str, QuantType] = {t.name: t for t in _ALL}
SUPPORTED: tuple[str, ...] = tuple(TYPES)
_BY_ID: dict[int, QuantType] = {t.ggml_type: t for t in _ALL}


def get_type(t: int | str | QuantType) -> QuantType:
    """Resolve a ggml type id, a name (any case) or a QuantType to the registered QuantType."""
    found: QuantType | None = None
    if isinstance(t, QuantType):
        found = TYPES.get(t.name)
        found = found if found == t else None
    elif isinstance(t, (int, np.integer)) and not isinstance(t, bool):
        found = _BY_ID.get(int(t))
    elif isinstance(t, str):
        found = TYPES.get(t.upper())
    if found is None:
        raise UnsupportedQuantTypeError(
            f"unsupported tensor type {_describe(t)}; supported: {', '.join(SUPPORTED)}")
    return found


def _describe(t: object) -> str:
    """Name an unknown type for the error message, using ggml's own name when the id is known."""
    if isinstance(t, (int, np.integer)) and not isinstance(t, bool):
        try:
            from gguf import GGMLQuantizationType
            return f"{GGMLQuantizationType(int(t)).name} (ggml type {int(t)})"
        except ValueError:
            return f"ggml type {int(t)}"
    return repr(t)
