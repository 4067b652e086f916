"""Write a random-weight GGUF file for a named shape, deterministic from a seed and fast at any size.

Quantizing billions of random floats in numpy would take hours, so weights are assembled from a pool:
for each ggml type we quantize a few thousand random blocks once (N(0, 0.02), like a real init), then
every matrix is a sequence of blocks drawn from that pool with a generator seeded by (seed, tensor name,
chunk). Blocks are self-contained (each carries its own scale), so the result is statistically a
quantized N(0, 0.02) matrix whose rows are distinct, which keeps logits non-degenerate.
Float types use 32-element "blocks" the same way. Norm weights are near 1, biases near 0.

The header is written with gguf's GGUFWriter; tensor data is then streamed chunk by chunk (built on a
thread pool, written in order), so memory stays bounded and writing a file of many gigabytes is mostly disk bandwidth.
"""
from __future__ import annotations

import functools
import math
import os
import threading
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter, LlamaFileType

from ..errors import InvalidParameterError
from ..quant import get_type, quantize
from .mix import Mix
from .shapes import Shape, get_shape
from .vocab import Vocab, build_vocab

INIT_STD = 0.02
POOL_BLOCKS = 4096        # distinct quantized blocks per type (uint16 indices: at most 32768)
CHUNK_BYTES = 32 << 20    # one unit of work and of writing
ALIGNMENT = 32            # GGUF default data alignment
# llama.cpp has no pure-K file types; name the nearest one (general.file_type is only informational)
_FILE_TYPE = {"F32": "ALL_F32", "Q3_K": "MOSTLY_Q3_K_S", "Q4_K": "MOSTLY_Q4_K_S", "Q5_K": "MOSTLY_Q5_K_S"}


@dataclass(frozen=True)
class TensorPlan:
    """One tensor to write: name, ggml dims (ne[0] = row length), type and how to fill it."""

    name: str
    ne: tuple[int, ...]
    qtype: str
    kind: str  # "matrix", "norm", "bias" or "rope_freqs"

    @property
    def n_elements(self) -> int:
        return math.prod(self.ne)

    @property
    def nbytes(self) -> int:
        qt = get_type(self.qtype)
        return self.n_elements // qt.block_size * qt.type_size


@dataclass(frozen=True)
class SynthResult:
    path: Path
    shape: Shape
    ftype: str
    seed: int
    n_params: int
    file_bytes: int
    seconds: float
    type_counts: dict[str, int]


def plan_tensors(shape: Shape, mix: Mix) -> list[TensorPlan]:
    """The tensors of `shape` with their types under `mix`: exactly those the graph builder reads, in the
    order it reads them (llama.cpp's names), so a synthetic file always fits its architecture's `Family`."""
    from ..models.transformer import tensor_list
    hp = shape_hparams(shape)
    out = []
    for name, shape_np in tensor_list(hp, shape.has_tensor):
        ne = tuple(shape_np[::-1])
        kind = ("rope_freqs" if name == "rope_freqs.weight" else "matrix" if len(ne) >= 2
                else "norm" if name.endswith("norm.weight") else "bias")
        out.append(TensorPlan(name, ne, mix.tensor_type(name, ne, shape.n_layer, shape.tied,
                                                          shape.n_head // max(shape.n_head_kv, 1)), kind))
    return out


def shape_hparams(shape: Shape):
    """`HParams` of the file `shape` describes, from the same metadata the writer stores."""
    from ..models.hparams import HParams
    meta = {k: v for k, v, _ in arch_metadata(shape)}
    meta.setdefault(f"{shape.arch}.vocab_size", shape.n_vocab)
    names = ["output.weight"] if not shape.tied else []
    if shape.rope_scaling_factor is not None:
        names.append("rope_freqs.weight")
    return HParams.from_metadata(shape.arch, meta, names)


def synthesize(shape: str | Shape, path: str | os.PathLike[str], ftype: str = "Q4_K_M", seed: int = 0,
               layers: int | None = None, workers: int | None = None) -> SynthResult:
    """Write `shape` (a name from SHAPES or a Shape) to `path` and return what was written."""
    t0 = time.perf_counter()
    shp = (get_shape(shape) if isinstance(shape, str) else shape).with_layers(layers)
    if not 0 <= seed < 2**32:
        raise InvalidParameterError(f"--seed must be in [0, 2**32), got {seed}")
    workers = workers or min(8, os.cpu_count() or 1)
    mix = Mix(ftype)
    plans = plan_tensors(shp, mix)
    vocab = build_vocab(shp.vocab, shp.n_vocab, shp.chat_template)
    path = Path(path)
    tmp = path.with_name(path.name + ".part")
    writer = GGUFWriter(tmp, shp.arch)
    _add_metadata(writer, shp, ftype, seed, vocab)
    for p in plans:
        writer.add_tensor_info(p.name, (*p.ne[::-1][:-1], p.nbytes // math.prod(p.ne[1:])), np.dtype(np.uint8),
                               p.nbytes, raw_dtype=GGMLQuantizationType[p.qtype])
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        fout = writer.fout[0]
        fout.write(bytes(-fout.tell() % ALIGNMENT))
        with ThreadPoolExecutor(workers) as ex:
            for chunk in _ordered(ex, _jobs(shp, plans, seed), window=2 * workers):
                fout.write(chunk)
        writer.close()
        tmp.replace(path)
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise
    return SynthResult(path=path, shape=shp, ftype=ftype, seed=seed,
                       n_params=sum(p.n_elements for p in plans), file_bytes=path.stat().st_size,
                       seconds=time.perf_counter() - t0, type_counts=dict(Counter(p.qtype for p in plans)))


def _jobs(shape: Shape, plans: list[TensorPlan], seed: int) -> Iterator[tuple]:
    """(function, args) for every chunk of every tensor, then the padding after it, in file order."""
    for p in plans:
        if p.kind == "rope_freqs":
            yield _llama3_rope_factors, (shape,)
        elif p.kind != "matrix":
            yield _small_tensor, (p, seed)
        else:
            qt = get_type(p.qtype)
            unit = max(qt.block_size, 32)
            unit_bytes = unit // qt.block_size * qt.type_size
            n_units = p.n_elements // unit
            per_chunk = max(1, CHUNK_BYTES // unit_bytes)
            for c, start in enumerate(range(0, n_units, per_chunk)):
                yield _matrix_chunk, (p.qtype, p.name, seed, c, min(per_chunk, n_units - start))
        yield bytes, (-p.nbytes % ALIGNMENT,)


def _ordered(ex: ThreadPoolExecutor, jobs: Iterator[tuple], window: int) -> Iterator:
    """Run jobs on `ex` at most `window` ahead and yield their results in submission order."""
    pending: list[Future] = []
    for fn, args in jobs:
        pending.append(ex.submit(fn, *args))
        if len(pending) >= window:
            yield pending.pop(0).result()
    for f in pending:
        yield f.result()


def _rng(seed: int, *keys: int | str) -> np.random.Generator:
    """A generator keyed by the seed and names (crc32, stable across runs unlike `hash`)."""
    words = [seed] + [zlib.crc32(k.encode()) if isinstance(k, str) else k for k in keys]
    return np.random.default_rng(words)


_POOL_LOCK = threading.Lock()


@functools.lru_cache(maxsize=64)
def _pool_unlocked(seed: int, qtype: str) -> np.ndarray:
    qt = get_type(qtype)
    unit = max(qt.block_size, 32)
    x = _rng(seed, "pool", qtype).standard_normal((POOL_BLOCKS, unit), dtype=np.float32)
    return np.ascontiguousarray(quantize(x * np.float32(INIT_STD), qt)).reshape(POOL_BLOCKS, -1)


def _pool(seed: int, qtype: str) -> np.ndarray:
    """POOL_BLOCKS quantized random blocks of `qtype`, built once per process (workers share them)."""
    with _POOL_LOCK:
        return _pool_unlocked(seed, qtype)


def _matrix_chunk(qtype: str, name: str, seed: int, chunk: int, n_units: int) -> np.ndarray:
    """`n_units` pool blocks; every run of POOL_BLOCKS consecutive blocks is a shifted random permutation,
    so blocks never repeat within a run (a tiny vocab of one-block rows gets distinct rows, not tied logits)."""
    rng = _rng(seed, name, chunk)
    perm = rng.permutation(POOL_BLOCKS).astype(np.uint16)
    shifts = rng.integers(0, POOL_BLOCKS, -(-n_units // POOL_BLOCKS), dtype=np.uint16)
    idx = (np.resize(perm, n_units) + np.repeat(shifts, POOL_BLOCKS)[:n_units]) % POOL_BLOCKS
    return np.take(_pool(seed, qtype), idx, axis=0)


def _small_tensor(p: TensorPlan, seed: int) -> np.ndarray:
    """Norms (near 1) and biases (near 0), always F32."""
    rng = _rng(seed, p.name)
    if p.kind == "norm":
        return (1.0 + 0.05 * rng.standard_normal(p.n_elements)).astype(np.float32)
    return (INIT_STD * rng.standard_normal(p.n_elements)).astype(np.float32)


def _llama3_rope_factors(shape: Shape) -> np.ndarray:
    """Llama 3.1's RoPE frequency divisors (what convert_hf_to_gguf.py stores as rope_freqs.weight).

    Wavelengths shorter than 8192/4 keep their frequency, longer than 8192/1 are divided by the factor,
    and the band in between is interpolated smoothly.
    """
    factor, low, high, old_ctx = shape.rope_scaling_factor, 1.0, 4.0, 8192.0
    inv_freq = 1.0 / shape.rope_base ** (np.arange(0, shape.head_dim, 2, dtype=np.float64) / shape.head_dim)
    wavelen = 2 * np.pi / inv_freq
    smooth = (old_ctx / wavelen - low) / (high - low)
    mid = 1.0 / ((1 - smooth) / factor + smooth)
    out = np.where(wavelen < old_ctx / high, 1.0, np.where(wavelen > old_ctx / low, factor, mid))
    return out.astype(np.float32)


def arch_metadata(shape: Shape) -> list[tuple[str, object, GGUFValueType]]:
    """The shape's hyperparameters in llama.cpp's keys, in file order, with their GGUF types."""
    a, U, F = shape.arch, GGUFValueType.UINT32, GGUFValueType.FLOAT32
    kv: list[tuple[str, object, GGUFValueType]] = [
        (f"{a}.context_length", shape.n_ctx_train, U), (f"{a}.embedding_length", shape.n_embd, U),
        (f"{a}.block_count", shape.n_layer, U), (f"{a}.feed_forward_length", shape.n_ff, U),
        (f"{a}.attention.head_count", shape.n_head, U), (f"{a}.attention.head_count_kv", shape.n_head_kv, U),
        (f"{a}.attention.key_length", shape.head_dim, U), (f"{a}.attention.value_length", shape.head_dim, U),
        (f"{a}.{_eps_key(a)}", shape.rms_eps, F), (f"{a}.rope.freq_base", shape.rope_base, F)]
    kv += [(f"{a}.{k}", v, _value_type(v)) for k, v in shape.extra]
    if shape.sliding_window is not None:
        kv.append((f"{a}.attention.sliding_window", shape.sliding_window, U))
    return kv


def _eps_key(arch: str) -> str:
    from ..models import get_family
    return "attention.layer_norm_rms_epsilon" if get_family(arch).norm == "rms" else "attention.layer_norm_epsilon"


def _value_type(v: object) -> GGUFValueType:
    if isinstance(v, bool):
        return GGUFValueType.BOOL
    if isinstance(v, int):
        return GGUFValueType.UINT32
    if isinstance(v, float):
        return GGUFValueType.FLOAT32
    if isinstance(v, str):
        return GGUFValueType.STRING
    raise InvalidParameterError(f"synth: no GGUF type for metadata value {v!r}")


def _add_metadata(w: GGUFWriter, shape: Shape, ftype: str, seed: int, vocab: Vocab) -> None:
    """Hyperparameters in llama.cpp's keys, provenance, and the tokenizer."""
    w.add_string("general.type", "model")
    w.add_string("general.name", f"oxigpu synthetic {shape.name}")
    w.add_string("general.description", f"random weights (seed {seed}) written by `oxigpu synth`")
    if shape.label:
        w.add_string("general.size_label", shape.label)
    w.add_uint32("general.file_type", int(LlamaFileType[_FILE_TYPE.get(ftype, f"MOSTLY_{ftype}")]))
    w.add_uint32("general.quantization_version", 2)
    w.add_string("oxigpu.synth.shape", shape.name)
    w.add_uint32("oxigpu.synth.seed", seed)
    for key, value, vtype in arch_metadata(shape):
        w.add_key_value(key, value, vtype)
    w.add_string("tokenizer.ggml.model", vocab.model)
    w.add_string("tokenizer.ggml.pre", vocab.pre)
    # explicit element types spare GGUFWriter a per-item type check over 100k+ entries
    w.add_key_value("tokenizer.ggml.tokens", vocab.tokens, GGUFValueType.ARRAY, GGUFValueType.STRING)
    if vocab.scores is not None:
        w.add_key_value("tokenizer.ggml.scores", vocab.scores.tolist(), GGUFValueType.ARRAY, GGUFValueType.FLOAT32)
    w.add_key_value("tokenizer.ggml.token_type", vocab.token_types.tolist(), GGUFValueType.ARRAY,
                    GGUFValueType.INT32)
    if vocab.merges:
        w.add_key_value("tokenizer.ggml.merges", vocab.merges, GGUFValueType.ARRAY, GGUFValueType.STRING)
    w.add_uint32("tokenizer.ggml.bos_token_id", vocab.bos)
    w.add_uint32("tokenizer.ggml.eos_token_id", vocab.eos)
    if vocab.eot is not None:
        w.add_uint32("tokenizer.ggml.eot_token_id", vocab.eot)
    if vocab.unk is not None:
        w.add_uint32("tokenizer.ggml.unknown_token_id", vocab.unk)
    if vocab.pad is not None:
        w.add_uint32("tokenizer.ggml.padding_token_id", vocab.pad)
    w.add_bool("tokenizer.ggml.add_bos_token", vocab.add_bos)
    w.add_bool("tokenizer.ggml.add_eos_token", False)
    if vocab.add_space_prefix is not None:
        w.add_bool("tokenizer.ggml.add_space_prefix", vocab.add_space_prefix)
    if vocab.chat_template is not None:
        w.add_string("tokenizer.chat_template", vocab.chat_template)
    if vocab.sep is not None:
        w.add_uint32("tokenizer.ggml.seperator_token_id", vocab.sep)
    if vocab.token_type_count:
        w.add_uint32("tokenizer.ggml.token_type_count", vocab.token_type_count)
