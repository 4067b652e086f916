"""llama.cpp (llama-cpp-python) loads every tiny synthetic shape and computes finite, varied logits.

Skipped where llama_cpp is not importable; dev/check_synth_llamacpp.py runs the real shapes too.
"""
from __future__ import annotations

import numpy as np
import pytest

from oxigpu.synth import SHAPES, synthesize
from oxigpu.synth.vocab import build_vocab

llama_cpp = pytest.importorskip("llama_cpp")

TINY = [name for name in SHAPES if name.startswith("tiny-")]


@pytest.mark.parametrize("ftype", ["Q4_K_M", "F16"])
@pytest.mark.parametrize("shape", TINY)
def test_llama_cpp_loads_and_evaluates(tmp_path, shape, ftype):
    path = synthesize(shape, tmp_path / "m.gguf", ftype, seed=0).path
    model = llama_cpp.Llama(model_path=str(path), n_ctx=64, n_threads=2, logits_all=True, verbose=False)
    try:
        # longer than tiny-gemma3's 16-token window, so its sliding-window layers are exercised
        toks = model.tokenize(b"Hello world, the quick brown fox jumps over the lazy dog twice.", add_bos=True)
        assert len(toks) > SHAPES[shape].sliding_window if SHAPES[shape].sliding_window else len(toks) > 8
        assert (toks[0] == model.token_bos()) == build_vocab(SHAPES[shape].vocab, SHAPES[shape].n_vocab, False).add_bos
        model.eval(toks)
        logits = np.array(model.scores[:model.n_tokens], dtype=np.float32)
    finally:
        model.close()
    assert logits.shape == (len(toks), SHAPES[shape].n_vocab)
    assert np.isfinite(logits).all()
    assert logits.std(axis=1).min() > 0.1 / dict(SHAPES[shape].extra).get("logit_scale", 1.0)   # granite divides
    assert len(set(logits.argmax(axis=1).tolist())) > 1
