"""GGUF reader: round trips through gguf.GGUFWriter, split shards, and one hand-crafted file per validation rule."""
from __future__ import annotations

import os
import re
import shutil
import struct
import time
import tracemalloc
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

from oxigpu.errors import GGUFError, GGUFFormatError, GGUFTruncatedError, UnsupportedQuantTypeError
from oxigpu.gguf import GGUFFile, TensorInfo

# ---------------------------------------------------------------- raw builder for hand-crafted files


def u32(v: int) -> bytes:
    return struct.pack("<I", v)


def u64(v: int) -> bytes:
    return struct.pack("<Q", v)


def gstr(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return u64(len(b)) + b


def kv(key: str | bytes, vtype: int, payload: bytes) -> bytes:
    return gstr(key) + u32(vtype) + payload


def tinfo(name: str | bytes, ne: tuple[int, ...], ggml_type: int, offset: int, n_dims: int | None = None) -> bytes:
    return (gstr(name) + u32(len(ne) if n_dims is None else n_dims) + b"".join(u64(d) for d in ne)
            + u32(ggml_type) + u64(offset))


ARCH = kv("general.architecture", V.STRING, gstr("llama"))
HEADER = 24


def build(kvs: list[bytes] = (), infos: list[bytes] = (), data: bytes = b"", *, version: int = 3,
          n_kv: int | None = None, n_tensors: int | None = None, alignment: int = 32,
          magic: bytes = b"GGUF") -> bytes:
    """Header + kvs + tensor infos, padded to `alignment`, + data."""
    body = (magic + u32(version) + u64(len(infos) if n_tensors is None else n_tensors)
            + u64(len(kvs) if n_kv is None else n_kv) + b"".join(kvs) + b"".join(infos))
    return body + b"\0" * (-len(body) % alignment) + data


def expect(tmp_path: Path, blob: bytes, cls: type[GGUFError], field: str, offset: int | None,
           match: str = "") -> GGUFError:
    """Opening `blob` raises exactly `cls`, whose message names the file, the field and the offset."""
    p = tmp_path / "bad.gguf"
    p.write_bytes(blob)
    with pytest.raises(GGUFError) as ei:
        GGUFFile(p)
    e = ei.value
    msg = str(e)
    assert type(e) is cls, msg
    assert e.field == field, msg
    assert e.offset == offset, msg
    assert str(p) in msg and repr(field) in msg
    if offset is not None:
        assert f"at byte {offset}" in msg
    assert re.search(match, msg), msg
    return e


def f32_tensor_file(ne: tuple[int, ...] = (8,), ggml_type: int = Q.F32, offset: int = 0, extra_kvs=(),
                    data_len: int | None = None) -> tuple[bytes, int]:
    """One tensor file; returns the blob and the position of the tensor info record."""
    kvs = [ARCH, *extra_kvs]
    info_pos = HEADER + sum(map(len, kvs))
    bs, ts = gguf.GGML_QUANT_SIZES[Q(ggml_type)] if ggml_type in set(Q) else (1, 4)
    n = data_len if data_len is not None else int(np.prod(ne)) // bs * ts
    return build(kvs, [tinfo("t", ne, ggml_type, offset)], (bytes(range(256)) * (n // 256 + 1))[:n]), info_pos


# ---------------------------------------------------------------- round trip through GGUFWriter

SCALARS = [
    ("t.u8", 200, V.UINT8), ("t.i8", -100, V.INT8), ("t.u16", 60000, V.UINT16), ("t.i16", -30000, V.INT16),
    ("t.u32", 4_000_000_000, V.UINT32), ("t.i32", -2_000_000_000, V.INT32),
    ("t.u64", 2**64 - 1, V.UINT64), ("t.i64", -2**63, V.INT64),
    ("t.f32", 0.1, V.FLOAT32), ("t.f64", 0.1, V.FLOAT64), ("t.bool_t", True, V.BOOL), ("t.bool_f", False, V.BOOL),
    ("t.str", "héllo ✓ 🙂", V.STRING), ("t.empty_str", "", V.STRING),
]
NUMERIC_ARRAYS = [
    (V.UINT8, np.uint8, [0, 255, 7]), (V.INT8, np.int8, [-128, 127]), (V.UINT16, np.uint16, [65535, 1]),
    (V.INT16, np.int16, [-32768, 5]), (V.UINT32, np.uint32, [2**32 - 1, 0]), (V.INT32, np.int32, [-5, 2**31 - 1]),
    (V.UINT64, np.uint64, [2**64 - 1]), (V.INT64, np.int64, [-2**63, 3]), (V.FLOAT32, np.float32, [1.5, -0.1]),
    (V.FLOAT64, np.float64, [1e300, -0.1]), (V.BOOL, np.bool_, [True, False, True]),
]
NESTED = {
    "t.nested_int": [[1, 2, 3], [4]],
    "t.nested_str": [["a", "bc"], ["✓"]],
    "t.nested3": [[[1.5, 2.5]], [[3.5]]],
}


def _tensors(rng: np.random.Generator) -> dict[str, tuple[np.ndarray, Q | None, tuple[int, ...]]]:
    """name -> (array handed to the writer, raw ggml type or None, expected ne)."""
    def qbytes(rows: int, blocks: int, t: Q) -> np.ndarray:
        return rng.integers(0, 256, (rows, blocks * gguf.GGML_QUANT_SIZES[t][1]), dtype=np.uint8)
    return {
        "f32.2d": (rng.standard_normal((3, 5)).astype(np.float32), None, (5, 3)),
        "f16.1d": (rng.standard_normal(64).astype(np.float16), None, (64,)),
        "f32.3d": (rng.standard_normal((2, 3, 4)).astype(np.float32), None, (4, 3, 2)),
        "f32.4d": (rng.standard_normal((2, 1, 3, 2)).astype(np.float32), None, (2, 3, 1, 2)),
        "q8_0": (qbytes(4, 2, Q.Q8_0), Q.Q8_0, (64, 4)),
        "q4_k": (qbytes(3, 2, Q.Q4_K), Q.Q4_K, (512, 3)),
        "q6_k": (qbytes(1, 1, Q.Q6_K), Q.Q6_K, (256, 1)),
        "q5_0": (qbytes(2, 3, Q.Q5_0), Q.Q5_0, (96, 2)),
    }


def write_model(path: Path, *, alignment: int | None = None, split_max_tensors: int = 0,
                seed: int = 0) -> dict[str, tuple[np.ndarray, Q | None, tuple[int, ...]]]:
    w = gguf.GGUFWriter(path, "llama", split_max_tensors=split_max_tensors)
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for key, val, vt in SCALARS:
        w.add_key_value(key, val, vt)
    for vt, _, vals in NUMERIC_ARRAYS:
        w.add_key_value(f"t.arr_{vt.name.lower()}", vals, V.ARRAY, sub_type=vt)
    w.add_key_value("t.arr_str", ["", "a", "ü", "日本語", "x" * 300], V.ARRAY, sub_type=V.STRING)
    for key, val in NESTED.items():
        w.add_key_value(key, val, V.ARRAY)
    tensors = _tensors(np.random.default_rng(seed))
    for name, (arr, raw, _) in tensors.items():
        w.add_tensor(name, arr, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


def check_tensors(f: GGUFFile, tensors: dict, alignment: int) -> None:
    assert list(f.tensors) == list(tensors)
    for name, (arr, raw, ne) in tensors.items():
        t = f.tensors[name]
        assert isinstance(t, TensorInfo)
        assert t.name == name and t.ne == ne and t.shape == ne[::-1]
        qt = raw if raw is not None else {np.dtype(np.float32): Q.F32, np.dtype(np.float16): Q.F16}[arr.dtype]
        bs, ts = gguf.GGML_QUANT_SIZES[qt]
        assert (t.ggml_type, t.type_name, t.block_size, t.type_size) == (qt, qt.name, bs, ts)
        assert t.n_elements == int(np.prod(ne)) and t.nbytes == arr.nbytes
        assert t.row_bytes == ne[0] // bs * ts
        assert t.offset % alignment == 0  # data_offset and relative offsets are both aligned
        d = t.data
        assert isinstance(d, np.memmap) and d.dtype == np.uint8 and not d.flags.writeable
        assert d.shape == (int(np.prod(ne[1:])), t.row_bytes)
        assert d.tobytes() == arr.tobytes()
        assert np.shares_memory(d, t.data)  # both views of the one mapping, no copies


def check_metadata(f: GGUFFile) -> None:
    md, ty = f.metadata, f.metadata_types
    assert f.arch == "llama" and ty["general.architecture"] == V.STRING
    for key, val, vt in SCALARS:
        assert ty[key] == vt
        if vt == V.FLOAT32:
            assert md[key] == float(np.float32(val)) and type(md[key]) is float
        else:
            assert md[key] == val and type(md[key]) is type(val)
    for vt, dt, vals in NUMERIC_ARRAYS:
        key = f"t.arr_{vt.name.lower()}"
        got = md[key]
        assert ty[key] == (V.ARRAY, vt)
        assert isinstance(got, np.ndarray) and got.ndim == 1 and got.dtype == np.dtype(dt)
        np.testing.assert_array_equal(got, np.array(vals, dtype=dt))
    assert md["t.arr_str"] == ["", "a", "ü", "日本語", "x" * 300] and ty["t.arr_str"] == (V.ARRAY, V.STRING)
    assert ty["t.nested_int"] == (V.ARRAY, V.ARRAY)
    assert [a.tolist() for a in md["t.nested_int"]] == NESTED["t.nested_int"]
    assert all(a.dtype == np.int32 for a in md["t.nested_int"])
    assert md["t.nested_str"] == NESTED["t.nested_str"]
    assert [[a.tolist() for a in inner] for inner in md["t.nested3"]] == NESTED["t.nested3"]
    assert md["t.nested3"][0][0].dtype == np.float32


@pytest.mark.parametrize("alignment", [None, 32, 64])
@pytest.mark.parametrize("version", [2, 3])
def test_round_trip(tmp_path: Path, alignment: int | None, version: int) -> None:
    p = tmp_path / "m.gguf"
    tensors = write_model(p, alignment=alignment)
    if version == 2:  # v2 and v3 share the little-endian layout; only the version field differs
        blob = bytearray(p.read_bytes())
        blob[4:8] = u32(2)
        p.write_bytes(blob)
    with GGUFFile(p) as f:
        assert f.version == version and f.alignment == (alignment or 32)
        assert f.path == p and f.shards == (p,)
        check_metadata(f)
        check_tensors(f, tensors, alignment or 32)
        ref = gguf.GGUFReader(p)
        assert f.data_offset == ref.data_offset
        assert [t.offset for t in f.tensors.values()] == [int(t.data_offset) for t in ref.tensors]
        assert set(f.metadata) == {k for k in ref.fields if not k.startswith("GGUF.")}
        assert f.get("t.u8") == 200 and f.get("nope", 7) == 7


def test_empty_arrays_and_no_tensors(tmp_path: Path) -> None:
    blob = build([ARCH, kv("a.s", V.ARRAY, u32(V.STRING) + u64(0)), kv("a.f", V.ARRAY, u32(V.FLOAT32) + u64(0)),
                  kv("a.a", V.ARRAY, u32(V.ARRAY) + u64(0))])
    p = tmp_path / "e.gguf"
    p.write_bytes(blob)
    f = GGUFFile(p)
    assert f.metadata["a.s"] == [] and f.metadata["a.a"] == [] and f.tensors == {}
    assert f.metadata["a.f"].dtype == np.float32 and f.metadata["a.f"].size == 0


def test_close_and_views(tmp_path: Path) -> None:
    p = tmp_path / "m.gguf"
    tensors = write_model(p)
    with GGUFFile(p) as f:
        view = f.tensors["q8_0"].data
    assert view.tobytes() == tensors["q8_0"][0].tobytes()  # a view taken before close stays valid
    assert f.metadata["t.u8"] == 200
    with pytest.raises(GGUFError, match="closed"):
        _ = f.tensors["q8_0"].data


def test_arch_missing(tmp_path: Path) -> None:
    p = tmp_path / "a.gguf"
    p.write_bytes(build([kv("general.name", V.STRING, gstr("x"))]))
    with pytest.raises(GGUFFormatError, match="general.architecture"):
        _ = GGUFFile(p).arch


# ---------------------------------------------------------------- split files


def test_split_round_trip(tmp_path: Path) -> None:
    tensors = write_model(tmp_path / "m.gguf", split_max_tensors=3)
    shards = [tmp_path / f"m-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]
    assert all(s.exists() for s in shards) and not (tmp_path / "m.gguf").exists()
    for given in (shards[0], shards[2]):
        with GGUFFile(given) as f:
            assert f.path == given and f.shards == tuple(shards)
            check_metadata(f)  # from shard 1, whichever shard was given
            assert f.metadata["split.count"] == 3 and f.metadata["split.no"] == 0
            check_tensors(f, tensors, 32)
            assert [f.tensors[n].path for n in tensors] == [shards[i // 3] for i in range(len(tensors))]


def test_split_missing_shard(tmp_path: Path) -> None:
    write_model(tmp_path / "m.gguf", split_max_tensors=3)
    (tmp_path / "m-00002-of-00003.gguf").unlink()
    with pytest.raises(GGUFError, match=r"shard 2 of 3 is missing: .*m-00002-of-00003\.gguf") as ei:
        GGUFFile(tmp_path / "m-00001-of-00003.gguf")
    assert ei.value.field == "split.count" and "at byte" in str(ei.value)


def test_split_wrong_shard_number(tmp_path: Path) -> None:
    write_model(tmp_path / "m.gguf", split_max_tensors=3)
    shutil.copy(tmp_path / "m-00003-of-00003.gguf", tmp_path / "m-00002-of-00003.gguf")
    with pytest.raises(GGUFFormatError, match="expected 1 for shard 2 of 3, got 2") as ei:
        GGUFFile(tmp_path / "m-00001-of-00003.gguf")
    assert ei.value.field == "split.no" and ei.value.path.endswith("m-00002-of-00003.gguf")


def test_split_tensor_count_mismatch(tmp_path: Path) -> None:
    write_model(tmp_path / "m.gguf", split_max_tensors=3)
    p = tmp_path / "m-00001-of-00003.gguf"
    blob = bytearray(p.read_bytes())
    key = b"split.tensors.count"
    pos = blob.index(key) + len(key) + 4  # value follows the key and its INT32 type tag
    blob[pos:pos + 4] = struct.pack("<i", 99)
    p.write_bytes(blob)
    with pytest.raises(GGUFFormatError, match="declares 99 tensors but the shards hold 8") as ei:
        GGUFFile(p)
    assert ei.value.field == "split.tensors.count" and ei.value.offset == pos


def test_split_bad_file_name(tmp_path: Path) -> None:
    write_model(tmp_path / "m.gguf", split_max_tensors=3)
    shutil.copy(tmp_path / "m-00001-of-00003.gguf", tmp_path / "renamed.gguf")
    with pytest.raises(GGUFFormatError, match="must be named") as ei:
        GGUFFile(tmp_path / "renamed.gguf")
    assert ei.value.field == "split.count"


def test_split_no_out_of_range(tmp_path: Path) -> None:
    blob = build([ARCH, kv("split.count", V.UINT16, struct.pack("<H", 2)),
                  kv("split.no", V.UINT16, struct.pack("<H", 5))])
    no_pos = HEADER + len(ARCH) + len(kv("split.count", V.UINT16, b"..")) + len(gstr("split.no")) + 4
    p = tmp_path / "m-00001-of-00002.gguf"
    p.write_bytes(blob)
    with pytest.raises(GGUFFormatError, match=r"integer in \[0, 1\]") as ei:
        GGUFFile(p)
    assert ei.value.field == "split.no" and ei.value.offset == no_pos


# ---------------------------------------------------------------- validation: header


def test_bad_magic(tmp_path: Path) -> None:
    expect(tmp_path, build([ARCH], magic=b"GGML"), GGUFFormatError, "magic", 0, "bad magic")


def test_version_1(tmp_path: Path) -> None:
    expect(tmp_path, build([ARCH], version=1), GGUFFormatError, "version", 4, "version 1 unsupported")


@pytest.mark.parametrize("version", [0, 4, 2**32 - 1])
def test_unsupported_version(tmp_path: Path, version: int) -> None:
    expect(tmp_path, build([ARCH], version=version), GGUFFormatError, "version", 4, "unsupported version")


def test_big_endian(tmp_path: Path) -> None:
    expect(tmp_path, build([ARCH], version=3 << 24), GGUFFormatError, "version", 4, "big-endian")


@pytest.mark.parametrize("count", [2**63, 2**64 - 1, 1000])
def test_hostile_kv_count(tmp_path: Path, count: int) -> None:
    tracemalloc.start()
    t0 = time.perf_counter()
    expect(tmp_path, build([ARCH], n_kv=count), GGUFTruncatedError, "kv_count", 16, f"{count} key/value pairs")
    assert time.perf_counter() - t0 < 0.5
    assert tracemalloc.get_traced_memory()[1] < 1 << 20
    tracemalloc.stop()


@pytest.mark.parametrize("count", [2**63, 2**64 - 1, 100])
def test_hostile_tensor_count(tmp_path: Path, count: int) -> None:
    expect(tmp_path, build([ARCH], n_tensors=count), GGUFTruncatedError, "tensor_count", 8, f"{count} tensor infos")


@pytest.mark.parametrize("size", [0, 1, 23])
def test_short_file(tmp_path: Path, size: int) -> None:
    expect(tmp_path, build([ARCH])[:size], GGUFTruncatedError, "header", 0,
           "empty file" if size == 0 else f"file is {size} bytes")


def test_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(GGUFError, match="not a regular file") as ei:
        GGUFFile(tmp_path)
    assert str(tmp_path) in str(ei.value)
    fifo = tmp_path / "fifo.gguf"
    os.mkfifo(fifo)
    with pytest.raises(GGUFError, match="not a regular file"):  # must not block opening the pipe
        GGUFFile(fifo)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(GGUFError, match="cannot open.*No such file"):
        GGUFFile(tmp_path / "nope.gguf")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_permission_denied(tmp_path: Path) -> None:
    p = tmp_path / "m.gguf"
    p.write_bytes(build([ARCH]))
    p.chmod(0)
    with pytest.raises(GGUFError, match="cannot open.*Permission denied"):
        GGUFFile(p)


# ---------------------------------------------------------------- validation: metadata


def test_truncated_in_kv(tmp_path: Path) -> None:
    blob = build([ARCH, kv("k", V.UINT64, u64(1))])
    pos = HEADER + len(ARCH) + len(gstr("k")) + 4
    expect(tmp_path, blob[:pos + 4], GGUFTruncatedError, "k", pos, "needs 8 bytes but only 4 remain")


def test_hostile_key_length(tmp_path: Path) -> None:
    blob = build([u64(2**63) + b"x" * 20])
    expect(tmp_path, blob, GGUFTruncatedError, "kv[0] key length", HEADER, f"string of {2**63} bytes")


def test_hostile_string_value_length(tmp_path: Path) -> None:
    blob = build([ARCH, kv("k", V.STRING, u64(2**64 - 1) + b"abc")])
    pos = HEADER + len(ARCH) + len(gstr("k")) + 4
    expect(tmp_path, blob, GGUFTruncatedError, "k length", pos, "string of")


def test_hostile_array_count(tmp_path: Path) -> None:
    blob = build([ARCH, kv("k", V.ARRAY, u32(V.FLOAT32) + u64(2**62) + b"\0" * 16)])
    pos = HEADER + len(ARCH) + len(gstr("k")) + 4 + 4
    expect(tmp_path, blob, GGUFTruncatedError, "k count", pos, f"{2**62} elements of type FLOAT32")


def test_hostile_string_in_array(tmp_path: Path) -> None:
    blob = build([ARCH, kv("k", V.ARRAY, u32(V.STRING) + u64(2) + gstr("ok") + u64(2**40) + b"zz")])
    pos = HEADER + len(ARCH) + len(gstr("k")) + 4 + 12 + len(gstr("ok"))
    expect(tmp_path, blob, GGUFTruncatedError, "k[1] length", pos, f"string of {2**40} bytes")


def test_unknown_value_type(tmp_path: Path) -> None:
    pos = HEADER + len(ARCH) + len(gstr("k"))
    expect(tmp_path, build([ARCH, kv("k", 13, u64(0))]), GGUFFormatError, "k type", pos,
           "unknown metadata value type 13")


def test_unknown_array_element_type(tmp_path: Path) -> None:
    pos = HEADER + len(ARCH) + len(gstr("k")) + 4
    expect(tmp_path, build([ARCH, kv("k", V.ARRAY, u32(99) + u64(0))]), GGUFFormatError, "k element type",
           pos, "unknown metadata value type 99")


def test_invalid_utf8_key(tmp_path: Path) -> None:
    expect(tmp_path, build([ARCH, kv(b"ab\xff", V.UINT8, b"\1")]), GGUFFormatError, "kv[1] key",
           HEADER + len(ARCH) + 8 + 2, "invalid UTF-8")


def test_invalid_utf8_value(tmp_path: Path) -> None:
    pos = HEADER + len(ARCH) + len(gstr("k")) + 4 + 8
    expect(tmp_path, build([ARCH, kv("k", V.STRING, gstr(b"\xc3("))]), GGUFFormatError, "k", pos, "invalid UTF-8")


def test_invalid_utf8_in_string_array(tmp_path: Path) -> None:
    payload = u32(V.STRING) + u64(3) + gstr("a") + gstr("b") + gstr(b"ok\xed\xa0\x80")  # a UTF-16 surrogate
    pos = HEADER + len(ARCH) + len(gstr("k")) + 4 + 12 + 9 + 9 + 8 + 2
    expect(tmp_path, build([ARCH, kv("k", V.ARRAY, payload)]), GGUFFormatError, "k[2]", pos, "invalid UTF-8")


def test_bad_bool(tmp_path: Path) -> None:
    pos = HEADER + len(ARCH) + len(gstr("k")) + 4
    expect(tmp_path, build([ARCH, kv("k", V.BOOL, b"\2")]), GGUFFormatError, "k", pos, "bool value must be 0 or 1")


def test_bad_bool_in_array(tmp_path: Path) -> None:
    pos = HEADER + len(ARCH) + len(gstr("k")) + 4 + 12 + 2
    expect(tmp_path, build([ARCH, kv("k", V.ARRAY, u32(V.BOOL) + u64(3) + b"\1\0\7")]), GGUFFormatError,
           "k[2]", pos, "got 7")


def test_nesting_too_deep(tmp_path: Path) -> None:
    depth = 9
    payload = (u32(V.ARRAY) + u64(1)) * (depth - 1) + u32(V.UINT8) + u64(0)
    pos = HEADER + len(ARCH) + len(gstr("k")) + 4 + 12 * 8
    expect(tmp_path, build([ARCH, kv("k", V.ARRAY, payload)]), GGUFFormatError, "k[0][0][0][0][0][0][0][0]",
           pos, "nested deeper than 8")


def test_nesting_chain_is_bounded(tmp_path: Path) -> None:
    """A 100k-deep chain of nested array headers must not hit the recursion limit."""
    payload = (u32(V.ARRAY) + u64(1)) * 100_000
    p = tmp_path / "deep.gguf"
    p.write_bytes(build([ARCH, kv("k", V.ARRAY, payload)]))
    with pytest.raises(GGUFFormatError, match="nested deeper"):
        GGUFFile(p)


def test_duplicate_key(tmp_path: Path) -> None:
    k = kv("k", V.UINT8, b"\1")
    expect(tmp_path, build([ARCH, k, k]), GGUFFormatError, "k", HEADER + len(ARCH) + len(k), "duplicate metadata key")


@pytest.mark.parametrize("value", [0, 3, 48, 2**32 - 1])
def test_alignment_not_power_of_two(tmp_path: Path, value: int) -> None:
    pos = HEADER + len(ARCH) + len(gstr("general.alignment")) + 4
    expect(tmp_path, build([ARCH, kv("general.alignment", V.UINT32, u32(value))]), GGUFFormatError,
           "general.alignment", pos, "not a non-zero power of two")


def test_alignment_wrong_type(tmp_path: Path) -> None:
    pos = HEADER + len(ARCH) + len(gstr("general.alignment")) + 4
    expect(tmp_path, build([ARCH, kv("general.alignment", V.UINT64, u64(64))]), GGUFFormatError,
           "general.alignment", pos, "must be a UINT32, not UINT64")


def test_arch_wrong_type(tmp_path: Path) -> None:
    pos = HEADER + len(gstr("general.architecture")) + 4
    expect(tmp_path, build([kv("general.architecture", V.UINT32, u32(1))]), GGUFFormatError,
           "general.architecture", pos, "must be a STRING")


# ---------------------------------------------------------------- validation: tensor infos


def test_valid_single_tensor(tmp_path: Path) -> None:
    blob, _ = f32_tensor_file()
    p = tmp_path / "ok.gguf"
    p.write_bytes(blob)
    t = GGUFFile(p).tensors["t"]
    assert t.data.shape == (1, 32) and t.data.tobytes() == bytes(range(32))


@pytest.mark.parametrize("n_dims", [0, 5, 2**32 - 1])
def test_bad_n_dims(tmp_path: Path, n_dims: int) -> None:
    blob = build([ARCH], [gstr("t") + u32(n_dims) + u64(8) * 5 + u32(0) + u64(0)], bytes(64))
    expect(tmp_path, blob, GGUFFormatError, "tensor 't' n_dims", HEADER + len(ARCH) + 9, "outside 1..4")


def test_zero_dim(tmp_path: Path) -> None:
    blob, pos = f32_tensor_file(ne=(8, 0, 2))
    expect(tmp_path, blob, GGUFFormatError, "tensor 't' ne[1]", pos + 9 + 4 + 8, "dimension is zero")


def test_block_size_divisibility(tmp_path: Path) -> None:
    blob, pos = f32_tensor_file(ne=(33, 2), ggml_type=Q.Q8_0, data_len=200)
    expect(tmp_path, blob, GGUFFormatError, "tensor 't' ne[0]", pos + 9 + 4, "not a multiple of the Q8_0 block size 32")


@pytest.mark.parametrize("ggml_type", [4, 5, 99, 2**32 - 1])  # 4, 5: the removed Q4_2/Q4_3
def test_unknown_ggml_type(tmp_path: Path, ggml_type: int) -> None:
    blob, pos = f32_tensor_file(ne=(32,), ggml_type=ggml_type, data_len=64)
    e = expect(tmp_path, blob, UnsupportedQuantTypeError, "tensor 't' type", pos + 9 + 4 + 8,
               f"unknown ggml type {ggml_type}")
    assert "supported types: F32, F16, Q4_0" in str(e) and "Q4_K" in str(e) and "Q8_0" in str(e)


def test_misaligned_offset(tmp_path: Path) -> None:
    blob, pos = f32_tensor_file(offset=16)
    expect(tmp_path, blob, GGUFFormatError, "tensor 't' offset", pos + 9 + 4 + 8 + 4,
           "not a multiple of the alignment 32")


def test_misaligned_offset_custom_alignment(tmp_path: Path) -> None:
    al = kv("general.alignment", V.UINT32, u32(64))
    kvs = [ARCH, al]
    blob = build(kvs, [tinfo("a", (8,), Q.F32, 0), tinfo("b", (8,), Q.F32, 32)], bytes(128), alignment=64)
    pos = HEADER + len(ARCH) + len(al) + len(tinfo("a", (8,), Q.F32, 0)) + 9 + 4 + 8 + 4
    expect(tmp_path, blob, GGUFFormatError, "tensor 'b' offset", pos, "alignment 64")


def test_tensor_past_end(tmp_path: Path) -> None:
    blob, pos = f32_tensor_file(ne=(8,), data_len=31)
    expect(tmp_path, blob, GGUFTruncatedError, "tensor 't' offset", pos + 9 + 4 + 8 + 4, "runs past the end")


def test_tensor_offset_huge(tmp_path: Path) -> None:
    blob, pos = f32_tensor_file(offset=2**64 - 32)
    expect(tmp_path, blob, GGUFTruncatedError, "tensor 't' offset", pos + 9 + 4 + 8 + 4, "runs past the end")


def test_element_count_overflow(tmp_path: Path) -> None:
    """ne whose product overflows int64 (2^160 elements) is measured in Python ints and rejected."""
    blob, pos = f32_tensor_file(ne=(2**40,) * 4, data_len=32)
    expect(tmp_path, blob, GGUFTruncatedError, "tensor 't' offset", pos + 9 + 4 + 32 + 4, "runs past the end")


def test_overlapping_tensors(tmp_path: Path) -> None:
    infos = [tinfo("a", (16,), Q.F32, 0), tinfo("b", (8,), Q.F32, 32)]
    blob = build([ARCH], infos, bytes(128))
    pos = HEADER + len(ARCH) + len(infos[0]) + 9 + 4 + 8 + 4
    expect(tmp_path, blob, GGUFFormatError, "tensor 'b' offset", pos, "overlaps tensor 'a'")


def test_duplicate_tensor_name(tmp_path: Path) -> None:
    infos = [tinfo("a", (8,), Q.F32, 0), tinfo("a", (8,), Q.F32, 32)]
    expect(tmp_path, build([ARCH], infos, bytes(64)), GGUFFormatError, "tensor[1] name",
           HEADER + len(ARCH) + len(infos[0]), "duplicate tensor name 'a'")


def test_invalid_utf8_tensor_name(tmp_path: Path) -> None:
    blob = build([ARCH], [tinfo(b"\x80x", (8,), Q.F32, 0)], bytes(32))
    expect(tmp_path, blob, GGUFFormatError, "tensor[0] name", HEADER + len(ARCH) + 8, "invalid UTF-8")


def test_truncated_tensor_info(tmp_path: Path) -> None:
    blob, pos = f32_tensor_file()
    cut = pos + 9 + 4 + 3
    expect(tmp_path, blob[:cut], GGUFTruncatedError, "tensor 't' ne[0]", pos + 13, "needs 8 bytes but only 3 remain")
