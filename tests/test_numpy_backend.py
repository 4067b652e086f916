"""NumpyBackend on tiny synthetic models: chunking and decode consistency, sliding window, caching, guards.

Consistency tolerance: chunked prefill + decode must reproduce one-shot logits to within
2e-4 x max|logit|. Float32 with different BLAS blockings per chunk shape differs by up to ~1.5e-6 relative
(worst over these tests 2.2e-6 with an f32 KV cache, when the bound was 2e-5); with the f16 cache a k or v
element that lands on either side of a rounding point between the two runs differs by a whole f16 step
(2^-11 relative), and the worst measured is 8.6e-5 (tiny-qwen2; 2.0e-5 to 5.7e-5 on the others).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from oxigpu.backends import base
from oxigpu.backends.base import Step
from oxigpu.backends.numpy_backend import NumpyBackend, QuantizedRows
from oxigpu.errors import ContextLengthError, InvalidParameterError, OutOfMemoryError
from oxigpu.gguf import GGUFFile
from oxigpu.graph.ir import arg
from oxigpu.graph.plan import compile
from oxigpu.models import build_graph

N_CTX = 64
N = 40  # tokens per test sequence: crosses tiny-gemma3's 16-token window twice
REL = 2e-4
SHAPES = ["tiny-llama", "tiny-llama3", "tiny-qwen2", "tiny-qwen3", "tiny-gemma3"]


@pytest.fixture(scope="module")
def synth_files(tmp_path_factory):
    from oxigpu.synth import get_shape, synthesize
    d = tmp_path_factory.mktemp("synth")
    # tiny-llama3: tiny-llama with llama-3.1 RoPE frequency factors (rope_freqs.weight)
    shapes = {s: get_shape(s) for s in SHAPES if s != "tiny-llama3"}
    shapes["tiny-llama3"] = dataclasses.replace(get_shape("tiny-llama"), rope_scaling_factor=8.0)
    return {s: synthesize(shp, d / f"{s}.gguf", ftype="Q4_K_M", seed=3, workers=1).path
            for s, shp in shapes.items()}


def tokens_for(model: GGUFFile, n: int = N) -> np.ndarray:
    vocab = len(model.metadata["tokenizer.ggml.tokens"])
    return np.random.default_rng(5).integers(0, vocab, n).astype(np.int32)


def one_shot(model: GGUFFile, toks: np.ndarray) -> np.ndarray:
    plan = compile(build_graph(model, None, len(toks), N_CTX, "all"))
    return NumpyBackend(model, N_CTX).run(plan, Step.single(toks, 0))["logits"]


def assert_close(ours: np.ndarray, ref: np.ndarray) -> None:
    err = np.abs(ours - ref).max()
    assert err <= REL * np.abs(ref).max(), f"max |diff| {err:.3g} vs max |logit| {np.abs(ref).max():.3g}"


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("chunk", [1, 7, 16])
def test_chunked_prefill_matches_one_shot(synth_files, shape, chunk):
    model = GGUFFile(synth_files[shape])
    toks = tokens_for(model)
    ref = one_shot(model, toks)
    assert np.isfinite(ref).all() and ref.std() > 0.05
    backend = NumpyBackend(model, N_CTX)
    plan = compile(build_graph(model, None, chunk, N_CTX, "all"))
    for pos in range(0, N, chunk):  # 40 % 7 and 40 % 16 leave a padded last chunk
        n = min(chunk, N - pos)
        got = backend.run(plan, Step.single(toks[pos:pos + n], pos))["logits"]
        assert got.shape == (chunk, ref.shape[1])
        assert_close(got[:n], ref[pos:pos + n])


@pytest.mark.parametrize("shape", SHAPES)
def test_prefill_then_decode_matches_one_shot(synth_files, shape):
    model = GGUFFile(synth_files[shape])
    toks = tokens_for(model)
    ref = one_shot(model, toks)
    backend = NumpyBackend(model, N_CTX)
    prefill = compile(build_graph(model, None, 8, N_CTX, "last"))
    decode = compile(build_graph(model, None, 1, N_CTX, "last"))
    out = backend.run(prefill, Step.single(toks[:5], 0))["logits"]  # one padded chunk of 5 in 8
    assert out.shape == (1, ref.shape[1])
    assert_close(out[0], ref[4])
    for pos in range(5, N):
        out = backend.run(decode, Step.single(toks[pos:pos + 1], pos))["logits"]
        assert_close(out[0], ref[pos])


def test_rope_frequency_factors_are_used(synth_files):
    model = GGUFFile(synth_files["tiny-llama3"])
    plan = compile(build_graph(model, None, 1, N_CTX))
    ropes = [n for n in plan.nodes if n.op == "rope_kv_attention"]   # rope q/k + kv_store + attention, fused
    assert ropes and all(arg(n, "freq_factors").tensor == "rope_freqs.weight" for n in ropes)
    ff = NumpyBackend(model, N_CTX)
    ff.load(plan)
    assert ff._weights["rope_freqs.weight"].max() > 1.0  # some frequencies are actually divided


def test_sliding_window_matters(synth_files):
    """tiny-gemma3 has a 16-token window on 5 of its 6 layers: logits agree with a window-less copy of
    the same graph before position 16 and differ after it."""
    model = GGUFFile(synth_files["tiny-gemma3"])
    toks = tokens_for(model)
    windowed = compile(build_graph(model, None, N, N_CTX, "all"))
    windows = [n.attrs["window"] for n in windowed.nodes if n.op == "attention"]
    assert windows == [16, 16, 16, 16, 16, 0]
    g = build_graph(model, None, N, N_CTX, "all")
    for n in g.nodes:
        if n.op == "attention":
            n.attrs["window"] = 0
    full = compile(g)
    a = NumpyBackend(model, N_CTX).run(windowed, Step.single(toks, 0))["logits"]
    b = NumpyBackend(model, N_CTX).run(full, Step.single(toks, 0))["logits"]
    assert_close(a[:16], b[:16])
    scale = np.abs(b).max()
    assert all(np.abs(a[p] - b[p]).max() > 1e-2 * scale for p in range(16, N))


def test_weights_and_states_are_shared_across_plans(synth_files):
    model = GGUFFile(synth_files["tiny-llama"])  # untied: the embedding table is only gathered from
    backend = NumpyBackend(model, N_CTX)
    p8, p1 = (compile(build_graph(model, None, T, N_CTX, "last")) for T in (8, 1))
    backend.load(p8)
    before = backend.memory_bytes()
    backend.load(p1)
    assert backend.memory_bytes() - before == p1.arena_size  # no second copy of weights or caches
    assert isinstance(backend._weights["token_embd.weight"], QuantizedRows)
    assert isinstance(backend._weights["output.weight"], np.ndarray)
    assert backend._plans[p8.key].buffers[p8.weights[1]] is backend._plans[p1.key].buffers[p1.weights[1]]
    tied = NumpyBackend(GGUFFile(synth_files["tiny-qwen2"]), N_CTX)
    tied.load(compile(build_graph(tied.model, None, 1, N_CTX, "last")))
    assert isinstance(tied._weights["token_embd.weight"], np.ndarray)  # the LM head needs the full matrix


def test_trace_reports_every_node(synth_files):
    model = GGUFFile(synth_files["tiny-qwen3"])
    plan = compile(build_graph(model, None, 4, N_CTX, "last"))
    seen = []
    NumpyBackend(model, N_CTX).run(plan, Step.single(tokens_for(model, 4), 0),
                                   trace=lambda node, outs: seen.append((node, [o.shape for o in outs])))
    assert [n for n, _ in seen] == plan.nodes
    for node, shapes in seen:
        expect = [v.shape for v in (node.outputs or node.inputs[2:])]
        assert shapes == expect


def test_guards(synth_files, monkeypatch):
    model = GGUFFile(synth_files["tiny-llama"])
    plan = compile(build_graph(model, None, 4, N_CTX, "last"))
    backend = NumpyBackend(model, N_CTX)
    with pytest.raises(ContextLengthError):
        backend.run(plan, Step.single(np.zeros(4, np.int32), N_CTX - 2))
    with pytest.raises(InvalidParameterError):
        backend.run(plan, Step.single(np.zeros(5, np.int32), 0))
    with pytest.raises(InvalidParameterError):
        NumpyBackend(model, 32).load(plan)  # plan built for another n_ctx
    for bad in (-1, 1024):  # tiny-llama's vocab is 1024; numpy would silently wrap -1
        with pytest.raises(InvalidParameterError, match="outside"):
            backend.run(plan, Step.single(np.array([1, bad], np.int32), 0))
    monkeypatch.setattr(base, "mem_available", lambda: 1 << 20)
    with pytest.raises(OutOfMemoryError, match=r"needs [0-9.]+ [KMG]iB of host memory .*available"):
        NumpyBackend(model, N_CTX).load(plan)


@pytest.mark.parametrize("shape", ["tiny-qwen2", "tiny-gemma3"])
def test_batched_steps_give_each_sequence_its_solo_logits(synth_files, shape):
    """Three sequences in mixed steps (a prefill chunk beside decode rows, slots in any order) and a decode
    step of the 4-slot bucket with one slot padded, their blocks scattered over a shared pool: every
    sequence's logits are its one-shot logits."""
    model = GGUFFile(synth_files[shape])
    vocab = len(model.metadata["tokenizer.ggml.tokens"])
    streams = [np.random.default_rng(s).integers(0, vocab, 16).astype(np.int32) for s in (1, 2, 3)]
    refs = [one_shot(model, t) for t in streams]
    mb = N_CTX // 32
    pool = np.random.default_rng(0).permutation(3 * mb)
    blocks = [pool[i * mb:(i + 1) * mb] for i in range(3)]
    nb = NumpyBackend(model, N_CTX)
    mixed = compile(build_graph(model, None, 16, N_CTX, "last", S=4, n_blocks=3 * mb))
    decode = compile(build_graph(model, None, 4, N_CTX, "last", S=4, n_blocks=3 * mb))
    a, b, _ = streams

    def check(plan, chunks):          # chunks: (stream index, start, count) per slot
        step = Step.batch([(streams[i][p:p + n], p, blocks[i]) for i, p, n in chunks])
        out = nb.run(plan, step)["logits"]
        assert out.shape == (len(chunks), refs[0].shape[1])       # the valid slots' rows
        for slot, (i, p, n) in enumerate(chunks):
            assert_close(out[slot], refs[i][p + n - 1])
    check(mixed, [(0, 0, 10), (1, 0, 6)])
    check(mixed, [(0, 10, 1), (2, 0, 3), (1, 6, 6)])
    check(decode, [(0, 11, 1), (1, 12, 1), (2, 3, 1)])
    check(decode, [(2, 4, 1), (0, 12, 1)])
    with pytest.raises(InvalidParameterError, match="one row per sequence"):
        nb.run(decode, Step.batch([(a[13:15], 13, blocks[0])]))
    with pytest.raises(InvalidParameterError, match="block in"):
        nb.run(mixed, Step.batch([(b[13:15], 13, [3 * mb + 5])]))


def test_one_slot_steps_are_checked_as_strictly_as_batches(synth_files):
    """A one-slot step takes a shorter path through Step.padded_inputs (a prompt chunk waits for it): it
    pads a good step exactly as the general checks do, and refuses every bad one with their message."""
    model = GGUFFile(synth_files["tiny-qwen2"])
    mb = N_CTX // 32
    mixed = compile(build_graph(model, None, 16, N_CTX, "last", S=1, n_blocks=mb))
    decode = compile(build_graph(model, None, 2, N_CTX, "last", S=2, n_blocks=mb))
    i32 = lambda *a: np.asarray(a, np.int32)                                   # noqa: E731
    ids = np.arange(5, 15, dtype=np.int32)
    blocks = np.arange(mb, dtype=np.int32)[::-1].copy()
    good = [Step.single(ids, 0, blocks), Step.single(ids[:1], 40, blocks), Step.single(ids, N_CTX - 10, blocks),
            Step.single(ids, 3)]
    for step in good:
        fast = step.padded_inputs(mixed, N_CTX)
        general = step._checked_table(mixed, N_CTX)
        assert np.array_equal(fast["block_table"][:1, :general.shape[1]], general)
        assert np.array_equal(fast["positions"][:step.n_tokens], step.positions)
        assert not fast["positions"][step.n_tokens:].any() and not fast["row_seq"].any()
    s = Step.single(ids, 4, blocks)
    bad = [(dataclasses.replace(s, positions=s.positions + N_CTX - 10), ContextLengthError, "exceed the context"),
           (dataclasses.replace(s, positions=s.positions - 5), ContextLengthError, "exceed the context"),
           (dataclasses.replace(s, positions=s.positions[::-1].copy()), InvalidParameterError, "consecutive"),
           (dataclasses.replace(s, positions=np.r_[s.positions[:5], s.positions[6:], 14].astype(np.int32)),
            InvalidParameterError, "consecutive"),
           (dataclasses.replace(s, row_seq=np.r_[np.zeros(9), 1].astype(np.int32)), InvalidParameterError,
            "row_seq must name"),
           (dataclasses.replace(s, out_rows=i32(3)), InvalidParameterError, "out_rows"),
           (dataclasses.replace(s, positions=s.positions[:4]), InvalidParameterError, "differ in length"),
           (Step.single(ids, 30, i32(0)), InvalidParameterError, "block in"),     # rows 32.. have none
           (dataclasses.replace(s, block_table=np.full((1, mb), mb, np.int32)), InvalidParameterError, "block in"),
           (dataclasses.replace(s, block_table=np.full((1, mb), -1, np.int32)), InvalidParameterError, "block in")]
    for step, err, msg in bad:
        with pytest.raises(err, match=msg):
            step.padded_inputs(mixed, N_CTX)
    with pytest.raises(InvalidParameterError, match="one row per sequence"):     # a decode plan's slot: one row
        Step.single(ids[:2], 0, blocks).padded_inputs(decode, N_CTX)
