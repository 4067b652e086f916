"""Fuzz the GGUF reader: mutated and truncated valid files either load (and every tensor view reads) or raise
a GGUFError naming file, field and offset; nothing else escapes, nothing hangs, nothing allocates much."""
from __future__ import annotations

import collections
import random
import signal
import struct
import time
import tracemalloc
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

from oxigpu.errors import GGUFError
from oxigpu.gguf import GGUFFile

N_CASES = 3000
N_SPLIT_CASES = 600
SEED = 20240611
CASE_TIME_LIMIT_S = 2.0  # SIGALRM guard against hangs; a case normally takes about a millisecond
ALLOC_SLACK = 64 * 1024  # peak Python allocation must stay under file size + this

_SCALAR_SIZES = {V.UINT8: 1, V.INT8: 1, V.UINT16: 2, V.INT16: 2, V.UINT32: 4, V.INT32: 4, V.FLOAT32: 4,
                 V.BOOL: 1, V.UINT64: 8, V.INT64: 8, V.FLOAT64: 8}


def _write_model(path: Path, variant: int, split_max_tensors: int = 0) -> None:
    """Small but structurally rich files: every value kind, nested arrays, quantized and float tensors."""
    rng = np.random.default_rng(variant)
    w = gguf.GGUFWriter(path, "llama", split_max_tensors=split_max_tensors)
    if variant == 1:
        w.add_custom_alignment(64)
    w.add_uint32("llama.block_count", 2)
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_int64("t.i64", -5)
    w.add_float64("t.f64", 2.5)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_key_value("tokenizer.ggml.tokens", ["<s>", "</s>", "a", "bc", "ü", "日本", "▁x", ""], V.ARRAY,
                    sub_type=V.STRING)
    w.add_key_value("tokenizer.ggml.scores", [0.0, -1.5, 2.0, 3.25], V.ARRAY, sub_type=V.FLOAT32)
    w.add_key_value("tokenizer.ggml.token_type", [1, 3, 1, 1], V.ARRAY, sub_type=V.INT32)
    w.add_key_value("t.bools", [True, False], V.ARRAY, sub_type=V.BOOL)
    w.add_key_value("t.nested", [[1, 2], [3]], V.ARRAY)
    w.add_key_value("t.nested_str", [["x", "yz"], ["w"]], V.ARRAY)
    if variant == 0:
        w.add_tensor("f32", rng.standard_normal((4, 8)).astype(np.float32))
        w.add_tensor("f16", rng.standard_normal(64).astype(np.float16))
        w.add_tensor("q8_0", rng.integers(0, 256, (2, 68), dtype=np.uint8), raw_dtype=Q.Q8_0)
        w.add_tensor("q4_k", rng.integers(0, 256, (1, 144), dtype=np.uint8), raw_dtype=Q.Q4_K)
    else:
        w.add_tensor("q6_k", rng.integers(0, 256, (2, 210), dtype=np.uint8), raw_dtype=Q.Q6_K)
        w.add_tensor("q5_0", rng.integers(0, 256, (3, 22), dtype=np.uint8), raw_dtype=Q.Q5_0)
        w.add_tensor("f32.3d", rng.standard_normal((2, 2, 4)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _write_base(path: Path, variant: int) -> bytes:
    """Variant 0: v3, alignment 32; variant 1: v2, alignment 64."""
    _write_model(path, variant)
    blob = bytearray(path.read_bytes())
    if variant == 1:
        blob[4:8] = struct.pack("<I", 2)  # v2: same layout, different version field
    return bytes(blob)


def _fields(blob: bytes) -> list[tuple[int, int]]:
    """(offset, size) of every count, length, type tag, dim and offset field of a valid file."""
    out = [(4, 4), (8, 8), (16, 8)]
    n_tensors, n_kv = struct.unpack_from("<QQ", blob, 8)
    pos = 24

    def u(fmt: str, size: int) -> int:
        nonlocal pos
        out.append((pos, size))
        (v,) = struct.unpack_from(fmt, blob, pos)
        pos += size
        return v

    def value(vt: int) -> None:
        nonlocal pos
        if vt == V.STRING:
            n = u("<Q", 8)  # not `pos += u(...)`: that would add to the pos read before u() moved it
            pos += n
        elif vt == V.ARRAY:
            et, n = u("<I", 4), u("<Q", 8)
            for _ in range(n):
                value(et)
        else:
            pos += _SCALAR_SIZES[vt]

    for _ in range(n_kv):
        value(V.STRING)
        value(u("<I", 4))
    for _ in range(n_tensors):
        value(V.STRING)
        for _ in range(u("<I", 4)):
            u("<Q", 8)
        u("<I", 4)
        u("<Q", 8)
    return out


def _mutate(rng: random.Random, bases: list[tuple[bytes, list[tuple[int, int]]]]) -> tuple[str, bytes]:
    blob, fields = rng.choice(bases)
    b = bytearray(blob)
    kind = rng.choice(["flip", "flip", "field", "field", "field", "splice", "truncate", "truncate+flip"])
    if kind.startswith("truncate"):
        cut = rng.choice([rng.randrange(0, 64), rng.randrange(0, len(b))])
        del b[cut:]
    if kind.endswith("flip") and b:
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] ^= rng.randrange(1, 256)
    elif kind == "field":
        for _ in range(rng.choice([1, 1, 2])):
            off, size = rng.choice(fields)
            top = 1 << (8 * size)
            (cur,) = struct.unpack_from("<Q" if size == 8 else "<I", b, off)
            val = rng.choice([0, 1, 2, 3, 5, 13, 255, top - 1, top >> 1, 2**32, 2**31 - 1, 2**16, len(b),
                              cur + 1, cur - 1, cur * 2, cur + 32, rng.randrange(top)]) % top
            b[off:off + size] = val.to_bytes(size, "little")
    elif kind == "splice":
        src = rng.choice(bases)[0]
        a = rng.randrange(len(src))
        chunk = src[a:a + rng.randint(1, 64)]
        at = rng.randrange(len(b))
        op = rng.choice(["overwrite", "insert", "delete", "duplicate"])
        if op == "overwrite":
            b[at:at + len(chunk)] = chunk
        elif op == "insert":
            b[at:at] = chunk
        elif op == "delete":
            del b[at:at + len(chunk)]
        else:
            b[at:at] = b[at:at + len(chunk)]
    return kind, bytes(b)


class _Hang(Exception):
    pass


def _on_alarm(signum: int, frame: object) -> None:
    raise _Hang()


def _load_and_touch(path: Path) -> int:
    with GGUFFile(path) as f:
        assert f.metadata.keys() == f.metadata_types.keys()
        total = 0
        for t in f.tensors.values():
            d = t.data
            assert d.shape == (t.n_elements // t.ne[0], t.row_bytes) and d.nbytes == t.nbytes
            assert t.offset + t.nbytes <= t.path.stat().st_size
            total += int(d.sum(dtype=np.uint64))  # reads every byte of the view
        return total


def _replace(path: Path, blob: bytes) -> None:
    """Unlink first: rewriting a file in place could shrink it under a mapping still alive (SIGBUS)."""
    path.unlink(missing_ok=True)
    path.write_bytes(blob)


class _Harness:
    """Runs each case under a SIGALRM hang guard and tracemalloc, and enforces the error contract."""

    def __init__(self) -> None:
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.slowest = 0.0
        self.use_alarm = hasattr(signal, "setitimer")

    def __enter__(self) -> _Harness:
        self.old_handler = signal.signal(signal.SIGALRM, _on_alarm) if self.use_alarm else None
        tracemalloc.start()
        self.t_start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        tracemalloc.stop()
        if self.use_alarm:
            signal.signal(signal.SIGALRM, self.old_handler)

    def run(self, label: str, path: Path, n_bytes: int) -> None:
        """Open `path` (whose files hold n_bytes in all): it loads and reads, or raises a proper GGUFError."""
        base_mem = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        t0 = time.perf_counter()
        if self.use_alarm:
            signal.setitimer(signal.ITIMER_REAL, CASE_TIME_LIMIT_S)
        try:
            _load_and_touch(path)
            self.outcomes["loaded"] += 1
        except GGUFError as e:
            msg = str(e)
            assert e.path and str(e.path) in msg, (label, msg)
            assert e.field and repr(e.field) in msg, (label, msg)
            assert e.offset is not None and 0 <= e.offset <= n_bytes, (label, msg)
            self.outcomes[type(e).__name__] += 1
        except _Hang:
            pytest.fail(f"{label} took over {CASE_TIME_LIMIT_S} s")
        except Exception as e:  # anything but GGUFError breaks the contract
            pytest.fail(f"{label} raised {type(e).__name__}: {e}")
        finally:
            if self.use_alarm:
                signal.setitimer(signal.ITIMER_REAL, 0)
        self.slowest = max(self.slowest, time.perf_counter() - t0)
        peak = tracemalloc.get_traced_memory()[1] - base_mem
        assert peak < n_bytes + ALLOC_SLACK, f"{label}: peak {peak} B for {n_bytes} B of files"

    def report(self, n: int) -> str:
        return (f"{n} cases in {time.perf_counter() - self.t_start:.1f} s, slowest {self.slowest * 1e3:.1f} ms, "
                f"{dict(self.outcomes)}")


def test_fuzz(tmp_path: Path) -> None:
    bases = []
    for variant in (0, 1):
        blob = _write_base(tmp_path / f"base{variant}.gguf", variant)
        _load_and_touch(tmp_path / f"base{variant}.gguf")  # the unmutated bases load
        bases.append((blob, _fields(blob)))
    rng = random.Random(SEED)
    with _Harness() as h:
        for i in range(N_CASES):
            kind, blob = _mutate(rng, bases)
            p = tmp_path / "case.gguf"
            _replace(p, blob)
            h.run(f"case {i} ({kind})", p, len(blob))
        print(f"\nfuzz: {h.report(N_CASES)}")
    # The mutations must reach past the header: some files still load, and every error class occurs.
    assert h.outcomes["loaded"] >= N_CASES // 20
    for cls in ("GGUFTruncatedError", "GGUFFormatError", "UnsupportedQuantTypeError"):
        assert h.outcomes[cls] >= 10, h.outcomes


def test_fuzz_split_shards(tmp_path: Path) -> None:
    """Mutate or delete one shard of a 2-shard model, then open either shard."""
    _write_model(tmp_path / "s.gguf", 0, split_max_tensors=2)
    shards = [tmp_path / f"s-{i:05d}-of-00002.gguf" for i in (1, 2)]
    originals = [s.read_bytes() for s in shards]
    assert len(GGUFFile(shards[1]).tensors) == 4
    bases = [(b, _fields(b)) for b in originals]
    rng = random.Random(SEED + 1)
    with _Harness() as h:
        for i in range(N_SPLIT_CASES):
            k = rng.randrange(2)
            if rng.random() < 0.05:
                kind, blob = "missing", b""
                shards[k].unlink()
            else:
                kind, blob = _mutate(rng, [bases[k]])
                _replace(shards[k], blob)
            h.run(f"split case {i} (shard {k + 1}, {kind})", shards[rng.randrange(2)],
                  len(blob) + len(originals[1 - k]))
            _replace(shards[k], originals[k])
        print(f"\nsplit fuzz: {h.report(N_SPLIT_CASES)}")
    assert h.outcomes["loaded"] >= N_SPLIT_CASES // 20 and h.outcomes["GGUFError"] >= 5, h.outcomes
