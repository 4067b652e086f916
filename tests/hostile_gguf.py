"""Test helper: take a GGUF file apart, change anything in it, write it back fast; and the contract every
hostile input must meet.

`GGUFParts.read(path)` gives the metadata as an ordered list of `[key, value type, value]` (arrays as
`(element type, items)`, nested arrays as lists of such pairs) and the tensors as `Tensor(name, ne,
ggml_type, data)`; `write(path)` serializes exactly what is there, whatever it is: wrong types, values out
of range, shapes that disagree with the data (``data`` is written as given, offsets follow it), duplicate
keys. It is a plain serializer (no validation, ~0.1 ms for a tiny model), so fuzzers can write thousands of
files. Metadata-only edits can also use the models helper's `gguf_edit.rewrite`; this one also edits
tensors and raw encodings.

`clean(fn)` runs one hostile case and checks the contract of `README.md`'s Reliability section: it
returns or raises an `OxigpuError` (anything else fails the test), within a time bound and a bound on the
process's peak resident memory (VmHWM, reset before the case where Linux allows it).
"""
from __future__ import annotations

import copy
import math
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGUFValueType

from oxigpu.errors import OxigpuError
from oxigpu.gguf import GGUFFile

V = GGUFValueType
_SCALAR = {V.UINT8: "<B", V.INT8: "<b", V.UINT16: "<H", V.INT16: "<h", V.UINT32: "<I", V.INT32: "<i",
           V.UINT64: "<Q", V.INT64: "<q", V.FLOAT32: "<f", V.FLOAT64: "<d", V.BOOL: "<B"}
_NP = {V.UINT8: "<u1", V.INT8: "<i1", V.UINT16: "<u2", V.INT16: "<i2", V.UINT32: "<u4", V.INT32: "<i4",
       V.UINT64: "<u8", V.INT64: "<i8", V.FLOAT32: "<f4", V.FLOAT64: "<f8", V.BOOL: "<u1"}


_ONE = {0: struct.pack("<f", 1.0), 1: b"\x00\x3c", 30: b"\x80\x3f"}   # 1.0 as F32, F16, BF16


@dataclass
class Tensor:
    name: str
    ne: tuple[int, ...]
    ggml_type: int
    data: bytes

    def resized(self, ne: tuple[int, ...] | None = None, ggml_type: int | None = None) -> Tensor:
        """This tensor with another shape and/or type, so the file stays structurally valid: the data cut or
        padded to the new size (same type), or rewritten as a valid encoding of the new type (1.0 for float
        types, blocks of 0x11 bytes, i.e. small finite scales, for quantized ones)."""
        ne = tuple(self.ne if ne is None else ne)
        t = self.ggml_type if ggml_type is None else ggml_type
        bs, ts = GGML_QUANT_SIZES[t]
        nbytes = math.prod(ne) // bs * ts if ne and ne[0] % bs == 0 else len(self.data)
        if t == self.ggml_type:
            data = self.data[:nbytes] + bytes(max(0, nbytes - len(self.data)))
        else:
            unit = _ONE.get(t, b"\x11")
            data = (unit * (nbytes // len(unit) + 1))[:nbytes]
        return Tensor(self.name, ne, t, data)


@dataclass
class GGUFParts:
    metadata: list[list[Any]] = field(default_factory=list)   # [key, GGUFValueType, value]
    tensors: list[Tensor] = field(default_factory=list)
    version: int = 3
    alignment: int = 32

    @classmethod
    def read(cls, path: str | Path) -> GGUFParts:
        with GGUFFile(path) as f:
            meta = [[k, _type(f.metadata_types[k]), _value(f.metadata[k], f.metadata_types[k])]
                    for k in f.metadata]
            tensors = [Tensor(t.name, t.ne, t.ggml_type, t.read().tobytes()) for t in f.tensors.values()]
            return cls(meta, tensors, f.version, f.alignment)

    def copy(self) -> GGUFParts:
        return GGUFParts(copy.deepcopy(self.metadata), list(self.tensors), self.version, self.alignment)

    # -- metadata edits ---------------------------------------------------------------------------------
    def keys(self) -> list[str]:
        return [k for k, _, _ in self.metadata]

    def get(self, key: str) -> Any:
        return next(v for k, _, v in self.metadata if k == key)

    def set(self, key: str, value: Any, vtype: GGUFValueType | None = None) -> GGUFParts:
        """Replace (or append) `key`; `vtype` defaults to the key's current type, else one guessed from
        `value` (bool, INT64, FLOAT64, STRING, or an ARRAY written as `(element type, items)`)."""
        for entry in self.metadata:
            if entry[0] == key:
                entry[1], entry[2] = vtype if vtype is not None else entry[1], value
                return self
        self.metadata.append([key, vtype if vtype is not None else guess_type(value), value])
        return self

    def drop(self, key: str) -> GGUFParts:
        self.metadata = [e for e in self.metadata if e[0] != key]
        return self

    def tensor(self, name: str) -> Tensor:
        return next(t for t in self.tensors if t.name == name)

    def replace_tensor(self, name: str, new: Tensor | None) -> GGUFParts:
        """Swap tensor `name` for `new` (None removes it)."""
        self.tensors = [(new if t.name == name else t) for t in self.tensors if new is not None or t.name != name]
        return self

    # -- writing ----------------------------------------------------------------------------------------
    def to_bytes(self, cache: dict[int, tuple[Any, bytes]] | None = None) -> bytes:
        """The file's bytes. `cache` (for writing many variants of one file) keeps each value's encoding by
        identity, holding the value so its id is not reused: unchanged entries are not encoded again."""
        out = bytearray(b"GGUF")
        out += struct.pack("<IQQ", self.version, len(self.tensors), len(self.metadata))
        for key, vtype, value in self.metadata:
            _put_str(out, key)
            out += struct.pack("<I", int(vtype))
            hit = cache.get(id(value)) if cache is not None else None
            if hit is not None and hit[0] is value and hit[1][:4] == struct.pack("<I", int(vtype)):
                out += hit[1][4:]
                continue
            start = len(out)
            _put_value(out, vtype, value)
            if cache is not None and isinstance(value, (tuple, str)):
                cache[id(value)] = (value, struct.pack("<I", int(vtype)) + bytes(out[start:]))
        offsets, pos = [], 0
        for t in self.tensors:
            offsets.append(pos)
            pos = -(-(pos + len(t.data)) // self.alignment) * self.alignment
        for t, off in zip(self.tensors, offsets):
            _put_str(out, t.name)
            out += struct.pack("<I", len(t.ne)) + b"".join(struct.pack("<Q", d % 2**64) for d in t.ne)
            out += struct.pack("<IQ", t.ggml_type, off)
        out += bytes(-len(out) % self.alignment)
        for t in self.tensors:   # each at its offset: the sizes before it, aligned
            out += t.data + bytes(-len(t.data) % self.alignment)
        return bytes(out)

    def write(self, path: str | Path, cache: dict[int, tuple[Any, bytes]] | None = None) -> Path:
        """Write the file (unlinking first: a file rewritten in place under a live mapping can fault)."""
        path = Path(path)
        path.unlink(missing_ok=True)
        path.write_bytes(self.to_bytes(cache))
        return path


def _type(desc: Any) -> GGUFValueType:
    return desc[0] if isinstance(desc, tuple) else desc


def _value(value: Any, desc: Any) -> Any:
    if not isinstance(desc, tuple):
        return value
    etype = desc[1]
    if etype == V.ARRAY:
        return (etype, [_nested(v) for v in value])
    if etype == V.STRING:
        return (etype, list(value))
    return (etype, np.asarray(value).copy())


def _nested(value: Any) -> Any:
    """A nested array as read (a numpy array, a list of strings or a list of lists) -> (etype, items)."""
    if isinstance(value, np.ndarray):
        return ({np.dtype(v): k for k, v in _NP.items() if k != V.BOOL}.get(value.dtype, V.BOOL), value)
    if all(isinstance(v, str) for v in value):
        return (V.STRING, list(value))
    return (V.ARRAY, [_nested(v) for v in value])


def guess_type(value: Any) -> GGUFValueType:
    if isinstance(value, (bool, np.bool_)):
        return V.BOOL
    if isinstance(value, (int, np.integer)):
        return V.INT64
    if isinstance(value, (float, np.floating)):
        return V.FLOAT64
    if isinstance(value, (str, bytes)):
        return V.STRING
    return V.ARRAY


def _put_str(out: bytearray, s: str | bytes) -> None:
    b = s.encode("utf-8", "surrogatepass") if isinstance(s, str) else bytes(s)
    out += struct.pack("<Q", len(b)) + b


def _put_value(out: bytearray, vtype: GGUFValueType, value: Any) -> None:
    if vtype == V.STRING:
        _put_str(out, value if isinstance(value, (str, bytes)) else str(value))
    elif vtype == V.ARRAY:
        etype, items = value
        if etype in _NP:
            dtype = np.dtype(_NP[etype])
            if isinstance(items, np.ndarray) and items.dtype == dtype:
                raw = items
            elif etype in (V.FLOAT32, V.FLOAT64):
                with np.errstate(over="ignore"):
                    raw = np.array([float(x) for x in items], np.float64).astype(dtype)
            else:   # integers (and bools) wrap to the element width, as a careless writer would store them
                bits = 8 * dtype.itemsize
                raw = np.frombuffer(b"".join((int(x) % 2**bits).to_bytes(dtype.itemsize, "little") for x in items),
                                    dtype)
            out += struct.pack("<IQ", int(etype), raw.size) + raw.tobytes()
        elif etype == V.STRING:   # one join: vocabularies of a million strings write in a second
            enc = [x.encode("utf-8", "surrogatepass") if isinstance(x, str) else bytes(x) for x in items]
            pack = struct.Struct("<Q").pack
            out += struct.pack("<IQ", int(etype), len(enc)) + b"".join([pack(len(e)) + e for e in enc])
        else:
            out += struct.pack("<IQ", int(etype), len(items))
            for item in items:
                _put_value(out, etype, item)
    else:
        fmt = _SCALAR[vtype]
        if fmt in ("<f", "<d"):
            v = float(value)
            if fmt == "<f" and math.isfinite(v) and abs(v) > 3.4028234663852886e38:
                v = math.copysign(math.inf, v)
            out += struct.pack(fmt, v)
        else:
            size = struct.calcsize(fmt)
            out += (int(value) % 2 ** (8 * size)).to_bytes(size, "little")


# -- the contract ---------------------------------------------------------------------------------------------
def _hwm_kib() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@dataclass
class Outcome:
    error: OxigpuError | None
    seconds: float
    peak_bytes: int | None   # peak resident memory above the level before the case (None: not measurable)
    value: Any = None


def clean(fn: Callable[[], Any], label: str = "", seconds: float = 5.0, memory: int = 1 << 30) -> Outcome:
    """Run `fn` as a hostile case: it must return or raise an OxigpuError (any other exception fails the test
    with the case's label), in under `seconds` and `memory` bytes of peak resident memory above the start."""
    import pytest
    base = _hwm_kib() if _reset_hwm() else None
    t0 = time.perf_counter()
    error, value = None, None
    try:
        value = fn()
    except OxigpuError as e:
        error = e
    except Exception as e:   # the contract: nothing but OxigpuError escapes
        pytest.fail(f"{label}: {type(e).__name__} escaped: {e}")
    elapsed = time.perf_counter() - t0
    peak = None if base is None else (_hwm_kib() - base) * 1024
    assert elapsed < seconds, f"{label}: took {elapsed:.1f} s (bound {seconds} s)"
    assert peak is None or peak < memory, f"{label}: peak memory grew by {peak / 2**20:.0f} MiB"
    return Outcome(error, elapsed, peak, value)
