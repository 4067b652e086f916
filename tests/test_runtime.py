"""Runtime pieces in isolation: stop-string hold-back, parameter validation, backend/n_ctx resolution,
the engine's prefix reuse (on a tiny synthetic model) and the KV block pool."""
from __future__ import annotations

import numpy as np
import pytest

from oxigpu.errors import ContextLengthError, InvalidParameterError
from oxigpu.runtime.engine import Engine, _TextDecoder, resolve_n_ctx, select_backend
from oxigpu.runtime.params import SamplingParams
from oxigpu.runtime.stops import StopMatcher


def feed_all(m: StopMatcher, pieces: list[str]) -> list[str]:
    out = []
    for p in pieces:
        out.append(m.feed(p))
        if m.stopped:
            return out
    out.append(m.flush())
    return out


def test_stop_spanning_pieces_is_never_emitted():
    out = feed_all(StopMatcher(["END"]), ["abc E", "N", "D tail"])
    assert "".join(out) == "abc "
    assert out[:2] == ["abc ", ""]          # "E" and "EN" were held back


def test_partial_stop_is_released_when_it_does_not_complete():
    m = StopMatcher(["END"])
    assert m.feed("xE") == "x"
    assert m.feed("Nd") == "ENd"
    assert m.flush() == ""
    m = StopMatcher(["END"])
    assert m.feed("xEN") == "x"
    assert m.flush() == "EN" and not m.stopped


def test_earliest_of_several_stops_wins():
    m = StopMatcher(["world", "lo w"])
    assert m.feed("hello world") == "hel"
    assert m.stopped


def test_no_stops_passes_everything():
    m = StopMatcher([])
    assert m.feed("abc") == "abc" and m.flush() == ""


@pytest.mark.parametrize("kwargs, fragment", [
    ({"max_tokens": -1}, "max_tokens"),
    ({"top_k": -5}, "top_k"),
    ({"repeat_last_n": -2}, "repeat_last_n"),
    ({"temperature": -0.1}, "temperature"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"min_p": -0.1}, "min_p"),
    ({"min_p": 1.01}, "min_p"),
    ({"repeat_penalty": 0.0}, "repeat_penalty"),
    ({"temperature": float("nan")}, "temperature"),
    ({"max_tokens": 2.5}, "max_tokens"),
    ({"seed": -1}, "seed"),
    ({"stop": [""]}, "stop"),
    ({"logit_bias": {-3: 1.0}}, "logit_bias"),
])
def test_sampling_params_reject_out_of_range(kwargs, fragment):
    with pytest.raises(InvalidParameterError, match=fragment):
        SamplingParams(**kwargs)


def test_sampling_params_normalize_and_override():
    p = SamplingParams(stop="x")
    assert p.stop == ("x",)
    q = p.with_overrides(temperature=0, top_k=None)
    assert q.temperature == 0 and q.top_k == p.top_k
    with pytest.raises(InvalidParameterError, match="unknown sampling parameter"):
        p.with_overrides(temprature=1.0)


def test_backend_and_context_resolution():
    assert select_backend("numpy") == "numpy"
    assert select_backend("auto") in ("numpy", "wgpu")
    with pytest.raises(InvalidParameterError, match="unknown backend 'cuda'"):
        select_backend("cuda")
    assert resolve_n_ctx(None, 2048) == 2048
    assert resolve_n_ctx(None, 131072) == 4096
    assert resolve_n_ctx(100, 2048) == 100
    with pytest.raises(InvalidParameterError, match="exceeds the 2048"):
        resolve_n_ctx(4096, 2048)
    with pytest.raises(InvalidParameterError):
        resolve_n_ctx(0, 2048)


def make_engine(path) -> Engine:
    """gemma3 (sliding-window layers) with small chunks, so prompts span several prefill chunks."""
    return Engine(path, backend="numpy", n_ctx=96, prefill_chunk=16)


@pytest.fixture(scope="module")
def engine(tiny_models):
    return make_engine(tiny_models["tiny-gemma3"])


def test_prefix_reuse_gives_the_logits_of_a_fresh_run(engine, tiny_models):
    """Full 32-token blocks of an earlier evaluation are reused (the prefix cache), the rest is evaluated."""
    rng = np.random.default_rng(0)
    shared = rng.integers(3, 1000, 37).tolist()          # one full block and 5 tokens; 3 prefill chunks
    engine.eval(shared + rng.integers(3, 1000, 9).tolist())
    target = shared + rng.integers(3, 1000, 40).tolist()  # 77 tokens: two full blocks
    reused_logits, reused = engine.eval(target)
    assert reused == 32
    ref, fresh = make_engine(tiny_models["tiny-gemma3"]).eval(target)
    assert fresh == 0
    np.testing.assert_allclose(reused_logits, ref, rtol=1e-4, atol=1e-4)
    assert int(np.argmax(reused_logits)) == int(np.argmax(ref))
    # the same tokens again reuse both of their full blocks: only the last 13 are evaluated
    again, n = engine.eval(target)
    assert n == 64
    np.testing.assert_allclose(again, ref, rtol=1e-4, atol=1e-4)
    engine.forget()
    assert engine.eval(target)[1] == 0


def test_teacher_forced_rows_match_incremental_logits(engine):
    tokens = list(range(10, 40))
    rows = np.concatenate(list(engine.eval_all(tokens)))
    assert rows.shape == (30, engine.vocab_size)
    last, _ = engine.eval(tokens[:20])
    np.testing.assert_allclose(rows[19], last, rtol=1e-4, atol=1e-4)


def test_engine_rejects_what_does_not_fit(engine):
    with pytest.raises(ContextLengthError):
        engine.eval(list(range(97)))
    with pytest.raises(InvalidParameterError, match="outside the vocabulary"):
        engine.eval([1, 10**6])


def test_text_decoder_never_splits_a_character_and_keeps_leading_spaces(tiny_models):
    llama = Engine(tiny_models["tiny-llama"], backend="numpy", n_ctx=16)
    tok = llama.tokenizer
    ids = tok.encode("é€ x", add_special=False)     # "▁", then byte tokens \xc3 \xa9 and \xe2 \x82 \xac
    decoder = _TextDecoder(tok)
    pieces = [decoder.feed(i) for i in ids] + [decoder.flush()]
    assert "".join(pieces) == " é€ x"                # the first piece keeps its space (decode() drops it)
    assert all("\ufffd" not in p for p in pieces)
    assert "" in pieces                                      # partial characters were held back
    decoder = _TextDecoder(tok)
    assert decoder.feed(ids[1]) == "" and decoder.flush() == "\ufffd"    # a dangling byte at the end


def test_block_pool_refcounts_prefix_cache_and_lru_eviction():
    from oxigpu.runtime.kvcache import BlockPool, SeqBlocks
    pool = BlockPool(4)
    a, b = SeqBlocks(), SeqBlocks()
    toks = list(range(100))
    assert pool.grow(a, 70) and len(a.blocks) == 3 and pool.n_free == 1
    pool.register(a, toks, 70)                       # two full blocks registered, the third is partial
    assert pool.n_cached == 2
    assert pool.match(b, toks[:64] + [7], 64) == 64 and b.blocks == a.blocks[:2]
    assert [pool.ref_count(x) for x in a.blocks] == [2, 2, 1]
    assert not pool.grow(b, 64 + 64)                 # needs 2 more, 1 free: nothing taken
    assert len(b.blocks) == 2 and pool.n_free == 1
    pool.release(a)
    assert pool.n_free == 2 and pool.n_cached == 2   # the partial block went free; shared ones stay held by b
    pool.release(b)
    assert pool.n_free == 4 and pool.n_cached == 2   # idle cached blocks count as free (evictable)
    c = SeqBlocks()
    assert pool.grow(c, 4 * 32) and pool.n_cached == 0    # taking every block evicts the cached ones
    pool.release(c)
    d = SeqBlocks()
    assert pool.match(d, toks, 99) == 0              # their chains are gone
    with pytest.raises(ValueError):
        BlockPool(0)


def test_block_pool_sizing_from_a_memory_budget():
    from oxigpu.errors import OutOfMemoryError
    from oxigpu.runtime.kvcache import pool_blocks
    per_block = 1 << 20
    assert pool_blocks(per_block, 4096, 8, None, None) == 8 * 128             # max_seqs full contexts
    assert pool_blocks(per_block, 4096, 8, 300 << 20, None) == 300             # kv_memory bounds it
    assert pool_blocks(per_block, 4096, 8, None, 10 << 20) == 128              # a default never below one context
    assert pool_blocks(per_block, 4096, 8, None, None, 500, "a binding") == 500
    with pytest.raises(OutOfMemoryError, match=r"needs 128.0 MiB for one sequence of n_ctx=4096 .*kv_memory=64.0 MiB"):
        pool_blocks(per_block, 4096, 8, 64 << 20, None)
    assert pool_blocks(per_block, 4096, 8, None, None, 100, "a binding") == 128    # the backend refuses it
    with pytest.raises(InvalidParameterError, match="kv_memory"):
        pool_blocks(per_block, 4096, 8, -5, None)
