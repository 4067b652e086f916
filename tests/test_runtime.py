"""Runtime pieces in isolation: stop-string hold-back, parameter validation, backend/n_ctx resolution,
and the engine's KV-cache prefix reuse (on a tiny synthetic model)."""
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
    rng = np.random.default_rng(0)
    shared = rng.integers(3, 1000, 37).tolist()          # crosses two prefill chunk boundaries
    engine.eval(shared + rng.integers(3, 1000, 9).tolist())
    target = shared + rng.integers(3, 1000, 21).tolist()
    reused_logits, reused = engine.eval(target)
    assert reused == len(shared)
    assert engine.cached_tokens == target
    ref, _ = make_engine(tiny_models["tiny-gemma3"]).eval(target)
    np.testing.assert_allclose(reused_logits, ref, rtol=1e-4, atol=1e-4)
    assert int(np.argmax(reused_logits)) == int(np.argmax(ref))
    # the same sequence again is answered from the cache; one token more is a single decode step
    again, n = engine.eval(target)
    assert n == len(target) and again is reused_logits
    _, n = engine.eval(target + [5])
    assert n == len(target)


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
