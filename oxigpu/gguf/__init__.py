"""GGUF reading with strict validation: metadata plus zero-copy, memory-mapped tensor views.

Decisions worth knowing when coding against this package:
- Every malformed, truncated, hostile or unreadable input raises a `GGUFError` subclass whose message names the
  file, the field and the byte offset (`GGUFTruncatedError` when a declared count/length/extent needs more bytes
  than the file has, `GGUFFormatError` for invalid values, `UnsupportedQuantTypeError` for unknown ggml types).
- GGUF v2 and v3, little-endian only. Nested arrays are limited to 8 levels (real files use none).
- Counts and sizes have budgets (`oxigpu.limits`: tensors, keys, elements per array, bytes per string),
  checked before anything is built: a file that exceeds one raises `GGUFFormatError` naming the limit.
- `metadata_types[key]` is a `GGUFValueType` for scalars and `(GGUFValueType.ARRAY, element_type)` for arrays.
- Numeric metadata arrays are read-only numpy copies (independent of the mapping); strings are strictly UTF-8;
  bools must be 0 or 1.
- `TensorInfo.data` is a read-only `np.memmap` view, shape (n_rows, row_bytes); nothing is dequantized here.
  `close()` drops the file's mappings: later `.data` calls raise, views taken earlier stay valid.
- Split models (`name-%05d-of-%05d.gguf`) open from any shard; metadata comes from shard 1, tensors are merged
  in shard order and each view maps its own shard.
"""
from .file import GGUFFile, TensorInfo

__all__ = ["GGUFFile", "TensorInfo"]
