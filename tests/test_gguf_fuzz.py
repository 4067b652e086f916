"""Fuzz the GGUF reader: mutated and truncated valid files either load (and every tensor view reads) or raise
a GGUFError naming file, field and offset; nothing else escapes, nothing hangs, nothing allocates much.
Then structure-aware mutations of metadata values (types, ranges, array contents), each taken through
the whole front end (hyperparameters, tokenizer, chat template, graph, a numpy step): only OxigpuErrors."""
from __future__ import annotations

import collections
import math
import os
import random
import signal
import struct
import time
import tracemalloc
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType
from gguf import GGUFValueType as V
from hostile_gguf import GGUFParts

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


# -- structure-aware fuzzing of metadata values, through the whole front end ---------------------------------
N_META_CASES = int(os.environ.get("OXIGPU_META_FUZZ_CASES", 10_000))
META_SEED = 29
MUTATE_ARCH_KEYS = True
"""Hyperparameters ({arch}.*) are mutated too: HParams validates them as values (tests/test_hparams_hostile.py
sweeps every key on every architecture; here they meet the tokenizer and structure mutations)."""
META_MEMORY = 256 << 20   # peak resident memory a case may add


def _micro_models(tmp_path: Path) -> list[Path]:
    """One-layer, 64-wide models with real vocabulary machinery: byte-level BPE (qwen2, with a chat template
    and merges) and SentencePiece-style (llama, merges derived from the vocabulary)."""
    from dataclasses import replace as dc_replace

    from oxigpu.synth import get_shape, synthesize
    out = []
    for name, n_vocab in (("tiny-qwen2", 640), ("tiny-llama", 320)):
        shape = dc_replace(get_shape(name), name="micro", n_layer=1, n_embd=64, n_head=2, n_head_kv=1, n_ff=128,
                           n_vocab=n_vocab, head_dim=32)
        out.append(synthesize(shape, tmp_path / f"micro-{name}.gguf", seed=1).path)
    return out


_INTS = [0, 1, -1, 2, 3, 7, 255, 2**15, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**64 - 1, -2**63]
_FLOATS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-45, 1e-30, 3.4e38, -1.0, 1e300]
_STRINGS = ["", "x" * 10_000, "\u2581" * 100, "<|im_end|>", "<|im_start|>system\n", "</s>", "none", "linear",
            "llama", "gpt2", "qwen2", "gemma3", "default", "llama-bpe", "\x00", "日本語\U0001F600", "{{", "{% for %}",
            "{{ messages[0]['content'] * 1000000 }}", "{% for i in range(10**9) %}{% endfor %}",
            "{{ raise_exception('no') }}", "{{ messages|tojson }}"]
_INT_TYPES = [V.UINT8, V.INT8, V.UINT16, V.INT16, V.UINT32, V.INT32, V.UINT64, V.INT64]
_ANY_TYPE = [*_INT_TYPES, V.FLOAT32, V.FLOAT64, V.BOOL, V.STRING, V.ARRAY]


def _random_value(rng: random.Random, vtype: GGUFValueType, depth: int = 0) -> Any:
    if vtype in _INT_TYPES:
        return rng.choice(_INTS)
    if vtype in (V.FLOAT32, V.FLOAT64):
        return rng.choice(_FLOATS)
    if vtype == V.BOOL:
        return rng.choice([0, 1, 1, 2])
    if vtype == V.STRING:
        return rng.choice(_STRINGS)
    etype = rng.choice(_ANY_TYPE if depth < 2 else _ANY_TYPE[:-1])
    return (etype, [_random_value(rng, etype, depth + 1) for _ in range(rng.choice([0, 1, 2, 5]))])


def _mutate_scalar(rng: random.Random, vtype: GGUFValueType, value: Any, retype: bool = True
                   ) -> tuple[GGUFValueType, Any]:
    if retype and rng.random() < 0.25:                        # another type altogether
        t = rng.choice(_ANY_TYPE)
        return t, _random_value(rng, t)
    if vtype in _INT_TYPES:
        v = int(value)
        return vtype, rng.choice(_INTS + [v + 1, v - 1, 2 * v, v // 2, rng.randrange(-1000, 100_000)])
    if vtype in (V.FLOAT32, V.FLOAT64):
        v = float(value)
        return vtype, rng.choice(_FLOATS + [-v, v * 1e10, v / 1e10])
    if vtype == V.BOOL:
        return vtype, rng.choice([0, 1, 2, 255])
    return vtype, rng.choice(_STRINGS + [value[: len(value) // 2], value + value, value.replace("{", "{{")])


def _mutate_array(rng: random.Random, value: tuple) -> tuple[GGUFValueType, Any]:
    etype, items = value
    items = list(items)
    op = rng.choice(["empty", "truncate", "one", "extend", "double", "shuffle", "element", "element", "element",
                     "retype", "nest", "scalar"])
    if op == "empty":
        items = []
    elif op == "truncate":
        items = items[: rng.randrange(len(items) + 1)]
    elif op == "one":
        items = items[:1]
    elif op == "extend":
        items = items + [_random_value(rng, etype, 1) if etype != V.ARRAY else (V.UINT8, [1])
                         for _ in range(rng.choice([1, 7, 300]))]
    elif op == "double":
        items = items + items
    elif op == "shuffle":
        rng.shuffle(items)
    elif op == "element" and items:
        for _ in range(rng.choice([1, 1, 3])):
            i = rng.randrange(len(items))
            if etype == V.STRING:
                items[i] = rng.choice(_STRINGS + [items[rng.randrange(len(items))], "a b", "\u2581a", "a" * 5000])
            elif etype != V.ARRAY:
                items[i] = _mutate_scalar(rng, etype, items[i], retype=False)[1]
    elif op == "retype":
        new = rng.choice(_ANY_TYPE[:-1])
        items = [_random_value(rng, new) for _ in items] if new != etype else items
        etype = new
    elif op == "nest":
        return V.ARRAY, (V.ARRAY, [(etype, items), (etype, items[:1])])
    elif op == "scalar":
        t = rng.choice(_ANY_TYPE[:-1])
        return t, _random_value(rng, t)
    if etype in _INT_TYPES or etype == V.BOOL:
        items = [int(x) if not isinstance(x, float) or math.isfinite(x) else 0 for x in items]
    return V.ARRAY, (etype, items)


def _mutate_metadata(rng: random.Random, base: GGUFParts) -> tuple[str, GGUFParts, set[str]]:
    """1-3 structure-aware edits of `base`'s metadata (values within and across types, array contents and
    lengths, removed/duplicated/unknown keys); returns a label, the edited parts and the touched keys."""
    arch = base.get("general.architecture")
    meta = [list(e) for e in base.metadata]
    keys = [k for k, _, _ in meta if MUTATE_ARCH_KEYS or not k.startswith(f"{arch}.")]
    edits, touched = [], set()
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        extra = ["split.count", "general.alignment", "x.unknown"] + ([f"{arch}.vocab_size"] if MUTATE_ARCH_KEYS else [])
        key = rng.choice(keys + extra)
        touched.add(key)
        entry = next((e for e in meta if e[0] == key), None)
        op = rng.random()
        if entry is None:
            t = rng.choice(_ANY_TYPE)
            meta.append([key, t, _random_value(rng, t)])
            edits.append(f"add {key}")
        elif op < 0.05:
            meta = [e for e in meta if e[0] != key]
            edits.append(f"drop {key}")
        elif op < 0.07:
            meta.append(list(entry))
            edits.append(f"duplicate {key}")
        elif entry[1] == V.ARRAY:
            entry[1], entry[2] = _mutate_array(rng, entry[2])
            edits.append(f"{key}: array edit")
        else:
            entry[1], entry[2] = _mutate_scalar(rng, entry[1], entry[2])
            edits.append(f"{key} = {str(entry[2])[:40]!r} ({V(entry[1]).name})")
    return "; ".join(edits), GGUFParts(meta, base.tensors, base.version, base.alignment), touched


def _front_end(path: Path, base_tok: Any, touched: set[str], full: bool) -> None:
    """What loading and using a model does with its metadata: parse, hyperparameters, tokenizer (rebuilt when
    a tokenizer key changed), encode/decode, the chat template (when it or a special token may have changed),
    the graph and one numpy step (when a hyperparameter changed); `full`: the whole LLM and two tokens."""
    from oxigpu.backends.base import Step
    from oxigpu.backends.numpy_backend import NumpyBackend
    from oxigpu.graph.plan import compile as compile_plan
    from oxigpu.models import HParams, build_graph
    from oxigpu.runtime.sampling import SamplerConfig, sample
    from oxigpu.tokenizer import Tokenizer
    if full:
        from oxigpu import LLM
        llm = LLM(path, backend="numpy", n_ctx=32)
        llm.generate("Hi <|im_end|> there", max_tokens=2, seed=1)
        llm.chat([{"role": "user", "content": "Hi <|im_end|>"}], max_tokens=1, seed=1)
        return
    with GGUFFile(path) as f:
        hp = HParams.from_gguf(f)
        tok_keys = {k for k in touched if k.startswith("tokenizer.")}
        tok = Tokenizer.from_metadata(f.metadata) if tok_keys else base_tok
        ids = tok.encode("Hi there <|im_end|> \u2581x 日本")
        tok.decode(ids)
        if tok_keys & {"tokenizer.chat_template", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                       "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"}:
            tok.apply_chat_template([{"role": "user", "content": "Hi <|im_end|>"}], max_tokens=4096)
        if any(k == "general.architecture" or not k.startswith(("tokenizer.", "x.", "general.")) for k in touched):
            plan = compile_plan(build_graph(f, hp, 2, 32))
            backend = NumpyBackend(f, 32)
            logits = backend.run(plan, Step.single([1, 2], 0))["logits"]
            sample(logits, SamplerConfig(), [1, 2])


def _hwm() -> int | None:
    try:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return None


def _reset_hwm() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def test_fuzz_metadata_values(tmp_path: Path) -> None:
    """10,000 structure-aware metadata mutations of two micro models (fixed seed), each through the front end:
    only OxigpuErrors, no hang (SIGALRM, 2 s a case), no case adding more than 256 MiB of peak memory."""
    from oxigpu.errors import OxigpuError
    from oxigpu.tokenizer import Tokenizer
    bases = [GGUFParts.read(p) for p in _micro_models(tmp_path)]
    toks = [Tokenizer.from_metadata(GGUFFile(p).metadata) for p in _micro_models(tmp_path)]
    rng = random.Random(META_SEED)
    outcomes: collections.Counter[str] = collections.Counter()
    path = tmp_path / "case.gguf"
    cache: dict[int, tuple[Any, bytes]] = {}
    use_alarm = hasattr(signal, "setitimer")
    old = signal.signal(signal.SIGALRM, _on_alarm) if use_alarm else None
    t_start, cpu_start, slowest, worst_mem = time.perf_counter(), time.process_time(), 0.0, 0
    try:
        for i in range(N_META_CASES):
            b = rng.randrange(len(bases))
            label, parts, touched = _mutate_metadata(rng, bases[b])
            parts.write(path, cache)
            measure = i % 5 == 0                                     # reading /proc costs a case's time
            if measure:
                _reset_hwm()
            base_mem = _hwm() if measure else None
            t0 = time.perf_counter()
            if use_alarm:
                signal.setitimer(signal.ITIMER_REAL, CASE_TIME_LIMIT_S)
            try:
                with np.errstate(all="ignore"):
                    _front_end(path, toks[b], touched, full=i % 50 == 0)
                outcomes["ran"] += 1
            except OxigpuError as e:
                outcomes[type(e).__name__] += 1
            except _Hang:
                pytest.fail(f"meta case {i} ({label}) took over {CASE_TIME_LIMIT_S} s")
            except Exception as e:
                pytest.fail(f"meta case {i} ({label}) raised {type(e).__name__}: {e}")
            finally:
                if use_alarm:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            slowest = max(slowest, time.perf_counter() - t0)
            if base_mem is not None:
                worst_mem = max(worst_mem, _hwm() - base_mem)
                assert worst_mem < META_MEMORY, f"meta case {i} ({label}): peak grew by {worst_mem >> 20} MiB"
    finally:
        if use_alarm:
            signal.signal(signal.SIGALRM, old)
    print(f"\nmetadata fuzz: {N_META_CASES} cases in {time.perf_counter() - t_start:.1f} s "
          f"({time.process_time() - cpu_start:.1f} s of CPU), slowest "
          f"{slowest * 1e3:.0f} ms, peak +{worst_mem >> 20} MiB, {dict(outcomes)}")
    assert outcomes["ran"] >= N_META_CASES // 10                 # mutations that keep a working model
    assert outcomes["TokenizerError"] >= 50 and outcomes["GGUFFormatError"] >= 50, outcomes
