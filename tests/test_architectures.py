"""Every architecture oxigpu builds, on its tiny synthetic file: `oxigpu info` describes it and 32 greedy
tokens come out of the numpy backend, each the argmax of the teacher-forced logits at its position (the
decode path agrees with the prefill path); on the GPU, three families that use the newer ops (soft-caps,
fused projections, experts) match the numpy backend. Parity with llama.cpp itself is
tests/test_parity_llamacpp.py (fixtures for every shape here)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from oxigpu import LLM
from oxigpu.cli.main import cli
from oxigpu.models import FAMILIES
from oxigpu.synth import SHAPES, synthesize

TINY = [name for name in SHAPES if name.startswith("tiny-")]
PROMPT = "Once upon a time, in a quiet town by the sea,"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("arch")
    return {s: synthesize(s, d / f"{s}.gguf", "Q4_K_M", seed=7, workers=1).path for s in TINY}


def test_every_family_has_a_tiny_shape_and_a_llama_cpp_fixture():
    """Decoders have teacher-forced logits from llama.cpp, encoders its embeddings (test_embeddings.py)."""
    from pathlib import Path
    assert {SHAPES[s].arch for s in TINY} == set(FAMILIES)
    here = Path(__file__).parent / "fixtures"
    fixtures = {p.stem for kind in ("parity", "embed") for p in (here / kind).glob("synth-*.npz")}
    assert {f"synth-{s}" for s in TINY} - {"synth-tiny-qwen2"} <= fixtures


def _no_eog(llm: LLM) -> dict[int, float]:
    """Bias the end-of-generation tokens away so every run makes all its tokens."""
    return {i: -100.0 for i in llm.tokenizer.eog_ids}


@pytest.mark.parametrize("shape", TINY)
def test_info_and_32_greedy_tokens(files, shape):
    res = CliRunner().invoke(cli, ["info", str(files[shape]), "--json"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.output)
    s = SHAPES[shape]
    assert info["supported"] and info["architecture"] == s.arch
    assert (info["hparams"]["n_layer"], info["hparams"]["n_embd"]) == (s.n_layer, s.n_embd)

    llm = LLM(str(files[shape]), backend="numpy", n_ctx=128)
    if llm.is_embedding_model:     # encoders embed instead of generating
        v = llm.embed([PROMPT, PROMPT[:12]])
        assert v.shape == (2, s.n_embd) and np.isfinite(v).all() and abs(float(v[0] @ v[1])) < 1
        return
    r = llm.generate(PROMPT, max_tokens=32, temperature=0, logit_bias=_no_eog(llm))
    assert len(r.token_ids) == 32 and r.finish_reason == "length"
    prompt = llm.tokenize(PROMPT)
    logits = llm.logits(prompt + r.token_ids)[len(prompt) - 1:-1]
    logits[:, list(llm.tokenizer.eog_ids)] -= 100.0
    top2 = np.sort(logits, axis=1)[:, -2:]
    chosen = logits[np.arange(32), r.token_ids]
    # each generated token is the argmax where it was decided (up to float ties between the two paths)
    assert np.all((chosen == top2[:, 1]) | (top2[:, 1] - top2[:, 0] < 1e-4)), shape


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("shape", ["tiny-gemma2", "tiny-phi3", "tiny-qwen3moe"])
def test_wgpu_matches_numpy(files, shape, dev):
    """Teacher-forced logits in 16-token prefill chunks and the greedy tokens (GPU-resident decode)."""
    from oxigpu.runtime.engine import Engine
    from oxigpu.runtime.params import SamplingParams
    out = {}
    for backend in ("numpy", "wgpu"):
        e = Engine(files[shape], backend=backend, n_ctx=96, prefill_chunk=16)
        ids = e.tokenizer.encode(PROMPT)
        gen = e.start(ids, SamplingParams(max_tokens=16, temperature=0,
                                          logit_bias={i: -100.0 for i in e.tokenizer.eog_ids}))
        for _ in gen:
            pass
        out[backend] = (np.concatenate(list(e.eval_all(ids + gen.result.token_ids))), gen.result.token_ids)
    (ln, tn), (lw, tw) = out["numpy"], out["wgpu"]
    assert np.abs(ln - lw).max() <= 1e-3 * np.abs(ln).max()
    assert tn == tw
