"""Strict parser for one GGUF file.

Every count, length, type and offset is checked against the bytes that remain before it is used, so a
hostile file can only ever raise a `GGUFError` subclass: no allocation is sized by an unchecked number,
no recursion is unbounded, and no struct/Unicode/index error escapes.
"""
from __future__ import annotations

import math
import mmap
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from ..errors import GGUFError, GGUFFormatError, GGUFTruncatedError, UnsupportedQuantTypeError
from ..limits import MAX_ARRAY_ITEMS, MAX_METADATA_KEYS, MAX_STRING_BYTES, MAX_TENSORS

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
HEADER_SIZE = 24  # magic, u32 version, u64 tensor count, u64 kv count
MAX_DIMS = 4  # GGML_MAX_DIMS
# Real files never nest arrays; the bound keeps a chain of 12-byte nested headers from exhausting the stack.
MAX_ARRAY_DEPTH = 8

V = GGUFValueType
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
# Scalar encodings; BOOL is read as a byte and checked to be 0 or 1.
_SCALARS: dict[int, struct.Struct] = {
    V.UINT8: struct.Struct("<B"), V.INT8: struct.Struct("<b"),
    V.UINT16: struct.Struct("<H"), V.INT16: struct.Struct("<h"),
    V.UINT32: _U32, V.INT32: struct.Struct("<i"),
    V.UINT64: _U64, V.INT64: struct.Struct("<q"),
    V.FLOAT32: struct.Struct("<f"), V.FLOAT64: struct.Struct("<d"),
    V.BOOL: struct.Struct("<B"),
}
_DTYPES: dict[int, np.dtype] = {
    V.UINT8: np.dtype("u1"), V.INT8: np.dtype("i1"), V.UINT16: np.dtype("<u2"), V.INT16: np.dtype("<i2"),
    V.UINT32: np.dtype("<u4"), V.INT32: np.dtype("<i4"), V.UINT64: np.dtype("<u8"), V.INT64: np.dtype("<i8"),
    V.FLOAT32: np.dtype("<f4"), V.FLOAT64: np.dtype("<f8"), V.BOOL: np.dtype("u1"),
}
# Fewest bytes one array element of each type can occupy: bounds a declared count before looping over it.
_MIN_ELEMENT_SIZE: dict[int, int] = {t: s.size for t, s in _SCALARS.items()} | {V.STRING: 8, V.ARRAY: 12}
_MIN_KV_SIZE = 8 + 4 + 1  # key length, value type, smallest value
_MIN_TENSOR_INFO_SIZE = 8 + 4 + 8 + 4 + 8  # name length, n_dims, one dim, type, offset

QUANT_SIZES: dict[int, tuple[int, int]] = {int(t): bs_ts for t, bs_ts in GGML_QUANT_SIZES.items()}
SUPPORTED_TYPE_NAMES = ", ".join(GGMLQuantizationType(t).name for t in sorted(QUANT_SIZES))

# metadata_types value: a GGUFValueType for scalars, (GGUFValueType.ARRAY, element type) for arrays.
TypeDesc = GGUFValueType | tuple[GGUFValueType, GGUFValueType]


@dataclass
class RawTensor:
    """One tensor-info record after validation; `offset` is absolute in its file."""

    name: str
    ne: tuple[int, ...]
    ggml_type: int
    offset: int
    nbytes: int
    info_pos: int  # file position of the record's offset field, for error messages


@dataclass
class ParsedFile:
    """Everything read from one GGUF file, plus the read-only mapping its tensors view."""

    path: Path
    size: int
    version: int
    alignment: int
    data_offset: int
    metadata: dict[str, Any]
    metadata_types: dict[str, TypeDesc]
    value_offsets: dict[str, int]  # key -> file position of its value, for error messages
    tensors: list[RawTensor]
    mm: np.memmap | None = field(repr=False, default=None)
    fd: int | None = field(repr=False, default=None)  # for pread: the inode that was mapped, closed on close()
    identity: tuple[int, int, int, int] = (0, 0, 0, 0)  # (device, inode, size, mtime_ns) when opened

    def close(self) -> None:
        """Drop the mapping and the descriptor (views handed out earlier keep their own mapping)."""
        self.mm = None
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        if self.fd is not None:
            os.close(self.fd)

    def check_unchanged(self, what: str) -> os.stat_result:
        """Raise GGUFError when the file was truncated or rewritten in place since it was opened: its
        mapping could then raise SIGBUS or hold other bytes. (A file replaced by rename is harmless:
        the descriptor and the mapping keep the old inode.)"""
        if self.fd is None:
            raise GGUFError("file is closed", path=str(self.path), field=what, offset=None)
        st = os.fstat(self.fd)
        if (st.st_size, st.st_mtime_ns) != self.identity[2:]:
            raise GGUFError(f"the file changed on disk since it was opened ({self.identity[2]} -> {st.st_size} "
                            f"bytes{', modified' if st.st_mtime_ns != self.identity[3] else ''}); load the model "
                            f"again", path=str(self.path), field=what, offset=None)
        return st

    def pread(self, offset: int, out: np.ndarray, what: str, check: bool = True) -> np.ndarray:
        """Fill `out` (contiguous uint8) with the file's bytes at `offset` through the descriptor, not the
        mapping: a file truncated underneath gives a short read (a GGUFError), never a signal. `check`: first
        `check_unchanged` (callers reading many pieces check once)."""
        if check or self.fd is None:
            self.check_unchanged(what)
        view = memoryview(out).cast("B")
        if not hasattr(os, "preadv"):   # no positional reads on this OS (Windows): copy from the mapping
            view[:] = self.mm[offset:offset + len(view)] if self.mm is not None else b""
            return out
        done = 0
        while done < len(view):
            n = os.preadv(self.fd, [view[done:]], offset + done)
            if n <= 0:
                raise GGUFError(f"the file ends at byte {offset + done}, inside this tensor: it was truncated "
                                f"since it was opened; load the model again", path=str(self.path), field=what,
                                offset=offset + done)
            done += n
        return out


class _Reader:
    """A cursor over the mapped bytes; every read checks the remaining length first."""

    def __init__(self, path: Path, buf: mmap.mmap, size: int):
        self.path, self.buf, self.size, self.pos = path, buf, size, 0
        self.items = 0  # elements of the metadata array being read, nested levels included

    def fail(self, cls: type[GGUFError], field: str, message: str, offset: int | None = None) -> GGUFError:
        return cls(message, path=str(self.path), field=field, offset=self.pos if offset is None else offset)

    def need(self, n: int, field: str) -> None:
        if n > self.size - self.pos:
            raise self.fail(GGUFTruncatedError, field,
                            f"needs {n} bytes but only {self.size - self.pos} remain in the file")

    def scalar(self, st: struct.Struct, field: str) -> Any:
        self.need(st.size, field)
        (v,) = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return v

    def string(self, field: str) -> str:
        len_pos = self.pos
        n = self.scalar(_U64, f"{field} length")
        if n > self.size - self.pos:
            raise self.fail(GGUFTruncatedError, f"{field} length",
                            f"string of {n} bytes but only {self.size - self.pos} remain in the file", len_pos)
        if n > MAX_STRING_BYTES:
            raise self.fail(GGUFFormatError, f"{field} length", f"string of {n} bytes exceeds the limit of "
                            f"{MAX_STRING_BYTES} (oxigpu.limits.MAX_STRING_BYTES)", len_pos)
        start = self.pos
        try:
            s = self.buf[start:start + n].decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(GGUFFormatError, field, f"invalid UTF-8 ({e.reason})", start + e.start) from None
        self.pos = start + n
        return s

    def string_array(self, n: int, field: str) -> list[str]:
        """Decode n length-prefixed strings in one tight loop (the 262k-entry vocabularies live here)."""
        buf, size, pos = self.buf, self.size, self.pos
        unpack = _U64.unpack_from
        out: list[str] = []
        append = out.append
        i = 0
        try:
            for i in range(n):
                if size - pos < 8:
                    self.pos = pos
                    self.need(8, f"{field}[{i}] length")
                (length,) = unpack(buf, pos)
                end = pos + 8 + length
                if end > size:
                    raise self.fail(GGUFTruncatedError, f"{field}[{i}] length",
                                    f"string of {length} bytes but only {size - pos - 8} remain in the file", pos)
                if length > MAX_STRING_BYTES:
                    raise self.fail(GGUFFormatError, f"{field}[{i}] length", f"string of {length} bytes exceeds "
                                    f"the limit of {MAX_STRING_BYTES} (oxigpu.limits.MAX_STRING_BYTES)", pos)
                pos += 8
                append(buf[pos:end].decode("utf-8"))
                pos = end
        except UnicodeDecodeError as e:
            raise self.fail(GGUFFormatError, f"{field}[{i}]", f"invalid UTF-8 ({e.reason})", pos + e.start) from None
        self.pos = pos
        return out

    def value_type(self, field: str) -> GGUFValueType:
        start = self.pos
        t = self.scalar(_U32, field)
        if t not in _MIN_ELEMENT_SIZE:
            raise self.fail(GGUFFormatError, field, f"unknown metadata value type {t}", start)
        return GGUFValueType(t)

    def value(self, vtype: GGUFValueType, field: str) -> tuple[Any, TypeDesc]:
        if vtype == V.STRING:
            return self.string(field), vtype
        if vtype == V.ARRAY:
            self.items = 0
            return self.array(field, 1)
        start = self.pos
        v = self.scalar(_SCALARS[vtype], field)
        if vtype == V.BOOL:
            if v > 1:
                raise self.fail(GGUFFormatError, field, f"bool value must be 0 or 1, got {v}", start)
            v = bool(v)
        return v, vtype

    def array(self, field: str, depth: int) -> tuple[Any, TypeDesc]:
        """Arrays of numbers -> read-only 1-D numpy arrays, of strings -> list[str], of arrays -> list."""
        if depth > MAX_ARRAY_DEPTH:
            raise self.fail(GGUFFormatError, field, f"arrays nested deeper than {MAX_ARRAY_DEPTH} levels")
        etype = self.value_type(f"{field} element type")
        count_pos = self.pos
        n = self.scalar(_U64, f"{field} count")
        if n * _MIN_ELEMENT_SIZE[etype] > self.size - self.pos:
            raise self.fail(GGUFTruncatedError, f"{field} count",
                            f"{n} elements of type {etype.name} need at least {n * _MIN_ELEMENT_SIZE[etype]} "
                            f"bytes but only {self.size - self.pos} remain", count_pos)
        self.items += n
        if self.items > MAX_ARRAY_ITEMS:
            raise self.fail(GGUFFormatError, f"{field} count", f"{self.items} array elements exceed the limit of "
                            f"{MAX_ARRAY_ITEMS} per key (oxigpu.limits.MAX_ARRAY_ITEMS)", count_pos)
        desc = (V.ARRAY, etype)
        if etype == V.STRING:
            return self.string_array(n, field), desc
        if etype == V.ARRAY:
            return [self.array(f"{field}[{i}]", depth + 1)[0] for i in range(n)], desc
        dtype = _DTYPES[etype]
        start = self.pos
        arr = np.frombuffer(self.buf[start:start + n * dtype.itemsize], dtype=dtype)
        if etype == V.BOOL:
            bad = np.flatnonzero(arr > 1)
            if bad.size:
                raise self.fail(GGUFFormatError, f"{field}[{bad[0]}]",
                                f"bool value must be 0 or 1, got {arr[bad[0]]}", start + int(bad[0]))
            arr = arr.view(np.bool_)
        self.pos = start + n * dtype.itemsize
        return arr, desc


def _open_mapping(path: Path) -> tuple[mmap.mmap, np.memmap, int, int, tuple[int, int, int, int]]:
    """Map the file read-only twice (an mmap for header parsing, an np.memmap for tensor views) and keep a
    descriptor of the same inode for reads that must not fault (`ParsedFile.pread`)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # before open(): a FIFO would block it
            raise GGUFError("not a regular file (directory, device or pipe)", path=str(path), field="file", offset=0)
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            if st.st_size < HEADER_SIZE:
                what = "empty file" if st.st_size == 0 else f"file is {st.st_size} bytes"
                raise GGUFTruncatedError(f"{what}, shorter than the {HEADER_SIZE}-byte GGUF header",
                                         path=str(path), field="header", offset=0)
            buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            mm = np.memmap(fh, dtype=np.uint8, mode="r")
            identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            return buf, mm, len(buf), os.dup(fh.fileno()), identity
    except (OSError, ValueError) as e:  # ValueError: mmap of a file that shrank to nothing underneath us
        raise GGUFError(f"cannot open: {e}", path=str(path), field="file", offset=0) from None


def parse_file(path: Path) -> ParsedFile:
    """Read and validate one GGUF file (no split handling)."""
    buf, mm, size, fd, identity = _open_mapping(path)
    try:
        parsed = _parse(_Reader(path, buf, size))
    except BaseException:
        os.close(fd)
        raise
    finally:
        buf.close()  # parsing copies out everything it keeps; tensor views use `mm`
    parsed.mm, parsed.fd, parsed.identity = mm, fd, identity
    return parsed


def _parse(r: _Reader) -> ParsedFile:
    if r.buf[:4] != MAGIC:
        raise r.fail(GGUFFormatError, "magic", f"bad magic {r.buf[:4]!r}, expected {MAGIC!r}", 0)
    r.pos = 4
    version = r.scalar(_U32, "version")
    if version not in SUPPORTED_VERSIONS:
        swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
        if version == 1:
            msg = "version 1 unsupported (only GGUF v2 and v3 can be read)"
        elif swapped in (1, 2, 3):
            msg = f"big-endian GGUF (version {swapped}) unsupported"
        else:
            msg = f"unsupported version {version} (only GGUF v2 and v3 can be read)"
        raise r.fail(GGUFFormatError, "version", msg, 4)
    n_tensors = r.scalar(_U64, "tensor_count")
    n_kv = r.scalar(_U64, "kv_count")
    remaining = r.size - r.pos
    if n_kv * _MIN_KV_SIZE > remaining:
        raise r.fail(GGUFTruncatedError, "kv_count",
                     f"{n_kv} key/value pairs need at least {n_kv * _MIN_KV_SIZE} bytes but only {remaining} remain",
                     16)
    if n_tensors * _MIN_TENSOR_INFO_SIZE > remaining - n_kv * _MIN_KV_SIZE:
        raise r.fail(GGUFTruncatedError, "tensor_count",
                     f"{n_tensors} tensor infos need at least {n_tensors * _MIN_TENSOR_INFO_SIZE} bytes "
                     f"more than the file holds", 8)
    if n_kv > MAX_METADATA_KEYS:
        raise r.fail(GGUFFormatError, "kv_count", f"{n_kv} metadata keys exceed the limit of {MAX_METADATA_KEYS} "
                     f"(oxigpu.limits.MAX_METADATA_KEYS)", 16)
    if n_tensors > MAX_TENSORS:
        raise r.fail(GGUFFormatError, "tensor_count", f"{n_tensors} tensors exceed the limit of {MAX_TENSORS} "
                     f"(oxigpu.limits.MAX_TENSORS)", 8)

    metadata: dict[str, Any] = {}
    types: dict[str, TypeDesc] = {}
    value_offsets: dict[str, int] = {}
    alignment = DEFAULT_ALIGNMENT
    for i in range(n_kv):
        key_pos = r.pos
        key = r.string(f"kv[{i}] key")
        if key in metadata:
            raise r.fail(GGUFFormatError, key, "duplicate metadata key", key_pos)
        vtype = r.value_type(f"{key} type")
        value_offsets[key] = r.pos
        metadata[key], types[key] = r.value(vtype, key)
        if key == "general.alignment":
            alignment = _check_alignment(r, metadata[key], vtype, value_offsets[key])
        elif key == "general.architecture" and vtype != V.STRING:
            raise r.fail(GGUFFormatError, key, f"must be a STRING, not {vtype.name}", value_offsets[key])

    tensors = _parse_tensor_infos(r, n_tensors, alignment)
    data_offset = -(-r.pos // alignment) * alignment
    _check_tensor_bounds(r, tensors, data_offset)
    return ParsedFile(r.path, r.size, version, alignment, data_offset, metadata, types, value_offsets, tensors)


def _check_alignment(r: _Reader, value: Any, vtype: GGUFValueType, pos: int) -> int:
    if vtype != V.UINT32:
        raise r.fail(GGUFFormatError, "general.alignment", f"must be a UINT32, not {vtype.name}", pos)
    if value == 0 or value & (value - 1):
        raise r.fail(GGUFFormatError, "general.alignment", f"{value} is not a non-zero power of two", pos)
    return value


def _parse_tensor_infos(r: _Reader, n_tensors: int, alignment: int) -> list[RawTensor]:
    """Read the tensor-info records; offsets stay relative to the data section until it is known."""
    tensors: list[RawTensor] = []
    seen: set[str] = set()
    for t in range(n_tensors):
        name_pos = r.pos
        name = r.string(f"tensor[{t}] name")
        if name in seen:
            raise r.fail(GGUFFormatError, f"tensor[{t}] name", f"duplicate tensor name {name!r}", name_pos)
        seen.add(name)
        label = f"tensor {name!r}"
        dims_pos = r.pos
        n_dims = r.scalar(_U32, f"{label} n_dims")
        if not 1 <= n_dims <= MAX_DIMS:
            raise r.fail(GGUFFormatError, f"{label} n_dims", f"n_dims {n_dims} is outside 1..{MAX_DIMS}", dims_pos)
        ne = tuple(r.scalar(_U64, f"{label} ne[{d}]") for d in range(n_dims))
        for d, v in enumerate(ne):
            if v == 0:
                raise r.fail(GGUFFormatError, f"{label} ne[{d}]", "dimension is zero", dims_pos + 4 + 8 * d)
        type_pos = r.pos
        ggml_type = r.scalar(_U32, f"{label} type")
        if ggml_type not in QUANT_SIZES:
            raise r.fail(UnsupportedQuantTypeError, f"{label} type",
                         f"unknown ggml type {ggml_type}; supported types: {SUPPORTED_TYPE_NAMES}", type_pos)
        block_size, type_size = QUANT_SIZES[ggml_type]
        if ne[0] % block_size:
            raise r.fail(GGUFFormatError, f"{label} ne[0]",
                         f"ne[0]={ne[0]} is not a multiple of the {GGMLQuantizationType(ggml_type).name} "
                         f"block size {block_size}", dims_pos + 4)
        nbytes = math.prod(ne) // block_size * type_size  # Python ints: no overflow
        offset_pos = r.pos
        offset = r.scalar(_U64, f"{label} offset")
        if offset % alignment:
            raise r.fail(GGUFFormatError, f"{label} offset",
                         f"data offset {offset} is not a multiple of the alignment {alignment}", offset_pos)
        tensors.append(RawTensor(name, ne, ggml_type, offset, nbytes, offset_pos))
    return tensors


def _check_tensor_bounds(r: _Reader, tensors: list[RawTensor], data_offset: int) -> None:
    """Make offsets absolute; every tensor must lie inside the file and no two may overlap."""
    for t in tensors:
        t.offset += data_offset
        if t.offset + t.nbytes > r.size:
            raise r.fail(GGUFTruncatedError, f"tensor {t.name!r} offset",
                         f"data [{t.offset}, {t.offset + t.nbytes}) runs past the end of the file "
                         f"({r.size} bytes; data section starts at {data_offset})", t.info_pos)
    ordered = sorted(tensors, key=lambda t: t.offset)
    for prev, cur in zip(ordered, ordered[1:]):
        if cur.offset < prev.offset + prev.nbytes:
            raise r.fail(GGUFFormatError, f"tensor {cur.name!r} offset",
                         f"data [{cur.offset}, {cur.offset + cur.nbytes}) overlaps tensor {prev.name!r} "
                         f"[{prev.offset}, {prev.offset + prev.nbytes})", cur.info_pos)
