"""`GGUFFile`: a validated, memory-mapped view of a GGUF model (single file or split shards)."""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType

from ..errors import GGUFError, GGUFFormatError
from ._parse import QUANT_SIZES, ParsedFile, TypeDesc, parse_file

_INT_TYPES = frozenset({GGUFValueType.UINT8, GGUFValueType.INT8, GGUFValueType.UINT16, GGUFValueType.INT16,
                        GGUFValueType.UINT32, GGUFValueType.INT32, GGUFValueType.UINT64, GGUFValueType.INT64})
_SHARD_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


@dataclass(frozen=True, eq=False)
class TensorInfo:
    """One tensor's layout; `data` is a zero-copy view of its raw (still quantized) bytes."""

    name: str
    ne: tuple[int, ...]  # ggml order: ne[0] varies fastest
    ggml_type: int
    type_name: str
    block_size: int
    type_size: int
    n_elements: int
    nbytes: int
    row_bytes: int
    offset: int  # absolute byte offset in `path`
    path: Path  # the file (shard) holding the data
    _file: ParsedFile = field(repr=False)

    @property
    def shape(self) -> tuple[int, ...]:
        """numpy order (reversed ne)."""
        return self.ne[::-1]

    @property
    def n_rows(self) -> int:
        return self.n_elements // self.ne[0]

    @property
    def data(self) -> np.memmap:
        """Read-only uint8 view of shape (n_rows, row_bytes) into the file mapping; never copies.

        The file's size and mtime are checked first (GGUFError if it changed since it was opened), but a view
        reads the mapping lazily: a file truncated while the view is read raises SIGBUS. Code that reads
        after loading, or must survive the file changing, uses `read` / `read_rows`."""
        mm = self._file.mm
        if mm is None:
            raise GGUFError("file is closed", path=str(self.path), field=f"tensor {self.name!r} data",
                            offset=self.offset)
        self._file.check_unchanged(f"tensor {self.name!r} data")
        return mm[self.offset:self.offset + self.nbytes].reshape(self.n_rows, self.row_bytes)

    def read(self) -> np.ndarray:
        """A copy of the raw bytes, shape (n_rows, row_bytes), read with pread: a file truncated or rewritten
        since it was opened raises GGUFError, never a signal."""
        out = np.empty((self.n_rows, self.row_bytes), np.uint8)
        return self._file.pread(self.offset, out, f"tensor {self.name!r} data")

    def read_rows(self, rows: np.ndarray) -> np.ndarray:
        """A copy of the raw bytes of `rows` (ints in [0, n_rows)), shape (*rows.shape, row_bytes), read as
        `read` does."""
        idx = np.asarray(rows, np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.n_rows):
            bad = int(idx[(idx < 0) | (idx >= self.n_rows)].flat[0])
            raise GGUFError(f"row {bad} is outside the tensor's {self.n_rows} rows", path=str(self.path),
                            field=f"tensor {self.name!r} data", offset=self.offset)
        out = np.empty((idx.size, self.row_bytes), np.uint8)
        what = f"tensor {self.name!r} data"
        self._file.check_unchanged(what)
        for i, r in enumerate(idx.reshape(-1).tolist()):
            self._file.pread(self.offset + r * self.row_bytes, out[i], what, check=False)
        return out.reshape(idx.shape + (self.row_bytes,))


def _tensor_info(pf: ParsedFile, name: str, ne: tuple[int, ...], ggml_type: int, offset: int,
                 nbytes: int) -> TensorInfo:
    block_size, type_size = QUANT_SIZES[ggml_type]
    return TensorInfo(name=name, ne=ne, ggml_type=ggml_type, type_name=GGMLQuantizationType(ggml_type).name,
                      block_size=block_size, type_size=type_size, n_elements=math.prod(ne),
                      nbytes=nbytes, row_bytes=ne[0] // block_size * type_size, offset=offset, path=pf.path,
                      _file=pf)


class GGUFFile:
    """A GGUF model opened read-only and validated up front.

    Attributes: `path` (as given, a Path), `shards` (every file read, in split order), `version`,
    `alignment`, `data_offset` (of the first shard), `metadata`, `metadata_types`, `tensors` (file order,
    merged over shards).

    `metadata_types[key]` is a `GGUFValueType` for scalars and `(GGUFValueType.ARRAY, element_type)` for
    arrays (element_type is ARRAY for nested arrays). Numeric arrays are read-only numpy arrays copied out of
    the file, so metadata outlives `close()`; tensor views already taken keep their mapping alive.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        first = parse_file(self.path)
        parts = _load_shards(first)
        head = parts[0]
        self.shards: tuple[Path, ...] = tuple(p.path for p in parts)
        self._parts = parts
        self.version: int = head.version
        self.alignment: int = head.alignment
        self.data_offset: int = head.data_offset
        self.metadata: dict[str, Any] = head.metadata
        self.metadata_types: dict[str, TypeDesc] = head.metadata_types
        self.tensors: dict[str, TensorInfo] = {}
        for pf in parts:
            for t in pf.tensors:
                if t.name in self.tensors:
                    raise GGUFFormatError(f"tensor {t.name!r} also appears in {self.tensors[t.name].path}",
                                          path=str(pf.path), field=f"tensor {t.name!r} name", offset=t.info_pos)
                self.tensors[t.name] = _tensor_info(pf, t.name, t.ne, t.ggml_type, t.offset, t.nbytes)
        if len(parts) > 1:
            _check_split_tensor_count(head, len(self.tensors))

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    @property
    def arch(self) -> str:
        """`general.architecture` (its type is checked at open; absence is reported here)."""
        arch = self.metadata.get("general.architecture")
        if arch is None:
            raise GGUFFormatError("required key is missing", path=str(self.shards[0]),
                                  field="general.architecture", offset=None)
        return arch

    def close(self) -> None:
        """Drop this object's mappings and descriptors; views handed out earlier stay valid until they are
        freed."""
        for pf in self._parts:
            pf.close()

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"GGUFFile({str(self.path)!r}, v{self.version}, {len(self.tensors)} tensors, "
                f"{len(self.metadata)} keys, {len(self.shards)} shard(s))")


def _split_key(pf: ParsedFile, key: str, lo: int, hi: int) -> int | None:
    """An integer split.* value in [lo, hi], or None when the key is absent."""
    if key not in pf.metadata:
        return None
    value, vtype = pf.metadata[key], pf.metadata_types[key]
    if vtype not in _INT_TYPES or not lo <= value <= hi:
        raise GGUFFormatError(f"must be an integer in [{lo}, {hi}], got {value!r} ({getattr(vtype, 'name', vtype)})",
                              path=str(pf.path), field=key, offset=pf.value_offsets[key])
    return value


def _load_shards(first: ParsedFile) -> list[ParsedFile]:
    """Open every shard of a split model (named `prefix-%05d-of-%05d.gguf`); metadata comes from shard 1."""
    count = _split_key(first, "split.count", 1, 99999)
    if count is None or count == 1:
        return [first]
    no = _split_key(first, "split.no", 0, count - 1)
    if no is None:
        raise GGUFFormatError(f"split.count is {count} but split.no is missing", path=str(first.path),
                              field="split.no", offset=first.value_offsets["split.count"])
    m = _SHARD_NAME.match(first.path.name)
    if m is None or int(m["count"]) != count or int(m["no"]) != no + 1:
        raise GGUFFormatError(f"shard {no + 1} of {count} must be named "
                              f"'<name>-{no + 1:05d}-of-{count:05d}.gguf'", path=str(first.path),
                              field="split.count", offset=first.value_offsets["split.count"])
    parts: list[ParsedFile] = []
    for i in range(count):
        shard_path = first.path.with_name(f"{m['prefix']}-{i + 1:05d}-of-{count:05d}.gguf")
        if i == no:
            parts.append(first)
            continue
        if not os.path.exists(shard_path):  # False (not an error) for any OSError too
            raise GGUFError(f"shard {i + 1} of {count} is missing: {shard_path}", path=str(first.path),
                            field="split.count", offset=first.value_offsets["split.count"])
        pf = parse_file(shard_path)
        for key, want in (("split.count", count), ("split.no", i)):
            got = _split_key(pf, key, 0, 99999)
            if got != want:
                raise GGUFFormatError(f"expected {want} for shard {i + 1} of {count}, got {got}",
                                      path=str(pf.path), field=key, offset=pf.value_offsets.get(key, 24))
        parts.append(pf)
    return parts


def _check_split_tensor_count(head: ParsedFile, total: int) -> None:
    declared = _split_key(head, "split.tensors.count", 0, 2**64 - 1)
    if declared is not None and declared != total:
        raise GGUFFormatError(f"declares {declared} tensors but the shards hold {total}", path=str(head.path),
                              field="split.tensors.count", offset=head.value_offsets["split.tensors.count"])
