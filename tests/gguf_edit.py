"""Test helper: copy a GGUF file with some metadata values replaced, added or removed (tensors unchanged).

Hostile-input tests use it to put a bad value where a real file has a good one, so the rest of the file
stays loadable and the value under test is the only thing wrong.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

_NUMPY_TYPES = {GGUFValueType.UINT8: np.uint8, GGUFValueType.INT8: np.int8, GGUFValueType.UINT16: np.uint16,
                GGUFValueType.INT16: np.int16, GGUFValueType.UINT32: np.uint32, GGUFValueType.INT32: np.int32,
                GGUFValueType.UINT64: np.uint64, GGUFValueType.INT64: np.int64,
                GGUFValueType.FLOAT32: np.float32, GGUFValueType.FLOAT64: np.float64}


def value_type(v: Any) -> GGUFValueType:
    """The GGUF type a Python value is written as: bool, int64, float64 (NaN/inf kept), string, array."""
    if isinstance(v, bool):
        return GGUFValueType.BOOL
    if isinstance(v, (int, np.integer)):
        return GGUFValueType.INT64
    if isinstance(v, (float, np.floating)):
        return GGUFValueType.FLOAT64
    if isinstance(v, (str, bytes)):
        return GGUFValueType.STRING
    return GGUFValueType.ARRAY


def _field_value(field) -> tuple[Any, GGUFValueType, GGUFValueType | None]:
    vtype = field.types[0]
    if vtype == GGUFValueType.ARRAY:
        sub = field.types[1] if len(field.types) > 1 else GGUFValueType.UINT32
        if sub == GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8") for i in field.data], vtype, sub
        return [field.parts[i][0].item() for i in field.data], vtype, sub
    if vtype == GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8"), vtype, None
    return field.parts[field.data[0]][0].item(), vtype, None


def rewrite(src: str | Path, dst: str | Path, set: dict[str, Any] | None = None,
            drop: tuple[str, ...] = ()) -> Path:
    """Copy ``src`` to ``dst`` with ``set`` keys replaced or added (typed by `value_type`; arrays of ints
    as INT64, of floats as FLOAT64, of strings as STRING) and ``drop`` keys removed."""
    set = dict(set or {})
    r = GGUFReader(str(src))
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    w = GGUFWriter(str(dst), arch)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or name in drop:
            continue
        if name in set:
            continue
        value, vtype, sub = _field_value(field)
        w.add_key_value(name, value, vtype, sub_type=sub)
    for name, value in set.items():
        vtype = value_type(value)
        if vtype == GGUFValueType.ARRAY:
            items = list(value)
            sub = value_type(items[0]) if items else GGUFValueType.INT64
            w.add_key_value(name, items, vtype, sub_type=sub)
        else:
            w.add_key_value(name, value, vtype)
    for t in r.tensors:
        w.add_tensor_info(t.name, list(t.data.shape), t.data.dtype, t.data.nbytes, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in r.tensors:
        w.write_tensor_data(t.data)
    w.close()
    return Path(dst)


def split(src: str | Path, dst_dir: str | Path, stem: str, max_tensors: int) -> list[Path]:
    """``src`` as a split set ``stem-0000i-of-0000n.gguf`` of at most ``max_tensors`` tensors per shard
    (gguf's own splitting: metadata in the first shard, split.* keys in every one)."""
    r = GGUFReader(str(src))
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    w = GGUFWriter(str(Path(dst_dir) / f"{stem}.gguf"), arch, split_max_tensors=max_tensors)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value, vtype, sub = _field_value(field)
        w.add_key_value(name, value, vtype, sub_type=sub)
    for t in r.tensors:
        w.add_tensor_info(t.name, list(t.data.shape), t.data.dtype, t.data.nbytes, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in r.tensors:
        w.write_tensor_data(t.data)
    w.close()
    return sorted(Path(dst_dir).glob(f"{stem}-*-of-*.gguf"))
