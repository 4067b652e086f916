"""Embeddings against llama.cpp (fixtures from dev/make_embedding_fixtures.py): the same tokens for every
text and pooled embeddings with cosine >= 0.9999 (and the same length to 1e-3 relative), for
nomic-embed-text-v1.5 (real, F16), synthetic bert / nomic-bert files and a decoder pooled by mean and by
last token; WordPiece tokenization identical on the tokenizer corpus; the API and CLI around it."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from oxigpu import LLM
from oxigpu.cli.main import cli
from oxigpu.errors import InvalidParameterError, OxigpuError

FIXTURES = Path(__file__).parent / "fixtures" / "embed"
CASES = sorted(p.stem for p in FIXTURES.glob("*.npz"))
MIN_COSINE = 0.9999


def _split(flat: np.ndarray, counts: np.ndarray) -> list[list[int]]:
    return [a.tolist() for a in np.split(flat, np.cumsum(counts)[:-1])]


def _model(name: str, fx, request, tmp_path_factory) -> Path:
    if str(fx["source"]) == "real":
        return request.getfixturevalue("nomic_path")
    from oxigpu.synth import synthesize
    shape, ftype, seed = (str(s) for s in fx["synth"])
    path = tmp_path_factory.mktemp("embed") / f"{shape}.gguf"
    synthesize(shape, path, ftype=ftype, seed=int(seed), workers=1)
    if hashlib.sha256(path.read_bytes()).hexdigest() != str(fx["sha256"]):
        pytest.fail(f"oxigpu.synth no longer writes the file {name} was recorded from; rerun "
                    f"dev/make_embedding_fixtures.py --only {name}")
    return path


@pytest.mark.parametrize("name", [pytest.param(c, marks=[pytest.mark.realmodel, pytest.mark.slow])
                                  if not c.startswith("synth-") else c for c in CASES])
def test_embeddings_match_llama_cpp(name, request, tmp_path_factory):
    fx = np.load(FIXTURES / f"{name}.npz")
    llm = LLM(str(_model(name, fx, request, tmp_path_factory)), backend="numpy", n_ctx=512)
    texts = [str(t) for t in fx["texts"]]
    for text, ids in zip(texts, _split(fx["token_ids"], fx["token_counts"])):
        assert llm.tokenize(text, parse_special=False) == ids, text
    pooling = str(fx["pooling"]) or None
    ours = llm.embed(texts, pooling=pooling, normalize=False)
    ref = fx["embeddings"]
    cos = (ours * ref).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(ref, axis=1)
    ratio = np.linalg.norm(ours, axis=1) / np.linalg.norm(ref, axis=1)
    print(f"\n{name}: cosine min {cos.min():.6f}, norm ratio {ratio.min():.5f}..{ratio.max():.5f}")
    assert cos.min() >= MIN_COSINE, (cos.argmin(), cos.min())
    assert np.abs(ratio - 1).max() < 1e-3
    normed = llm.embed(texts[:3], pooling=pooling)
    assert np.allclose(np.linalg.norm(normed, axis=1), 1.0, atol=1e-6)
    assert np.allclose(normed, ours[:3] / np.linalg.norm(ours[:3], axis=1, keepdims=True), atol=1e-6)


@pytest.mark.parametrize("name", [pytest.param(c, marks=[pytest.mark.realmodel])
                                  if not c.startswith("synth-") else c
                                  for c in CASES if "bert" in c or "nomic" in c])
def test_wordpiece_tokenization_matches_llama_cpp(name, request, tmp_path_factory):
    fx = np.load(FIXTURES / f"{name}.npz")
    if "corpus" not in fx:
        pytest.skip("no corpus in this fixture")
    from oxigpu.gguf import GGUFFile
    from oxigpu.tokenizer import Tokenizer
    with GGUFFile(_model(name, fx, request, tmp_path_factory)) as f:
        tok = Tokenizer.from_metadata(f.metadata)
    corpus = [str(t) for t in fx["corpus"]]
    both = _split(fx["corpus_ids"], fx["corpus_counts"])
    plain = _split(fx["corpus_plain_ids"], fx["corpus_plain_counts"])
    bad = [t for t, a, b in zip(corpus, both, plain)
           if tok.encode(t, add_special=True, parse_special=True) != a
           or tok.encode(t, add_special=False, parse_special=False) != b]
    assert not bad, f"{len(bad)} of {len(corpus)} texts tokenize differently, e.g. {bad[0]!r}"


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    from oxigpu.synth import synthesize
    return synthesize("tiny-bert", tmp_path_factory.mktemp("tb") / "b.gguf", "F16", seed=1, workers=1).path


def test_embedding_model_api_and_errors(tiny_bert):
    llm = LLM(str(tiny_bert), backend="numpy")
    v = llm.embed("hello world")
    assert v.shape == (128,) and v.dtype == np.float32 and abs(float(np.linalg.norm(v)) - 1) < 1e-6
    assert llm.embed(["a", "b", "c"]).shape == (3, 128)
    assert np.allclose(llm.embed(["hello world"])[0], v)
    assert np.allclose(llm.embed([llm.tokenize("hello world")])[0], v)     # token ids, as the server passes
    with pytest.raises(InvalidParameterError, match="embedding model"):
        llm.generate("hello")
    with pytest.raises(InvalidParameterError, match="embedding model"):
        llm.logits("hello")
    for bad in ([], [1.5], [[1, "a"]], b"x", None, [[10**9]]):
        with pytest.raises(InvalidParameterError):
            llm.embed(bad)
    with pytest.raises(InvalidParameterError, match="pooling"):
        llm.embed("x", pooling="max")
    with pytest.raises(OxigpuError, match="context"):
        llm.embed("word " * 600)


def test_oxigpu_embed_cli(tiny_bert):
    res = CliRunner().invoke(cli, ["embed", "-m", str(tiny_bert), "--backend", "numpy", "--json", "one", "two"])
    assert res.exit_code == 0, res.output
    vecs = np.array(json.loads(res.output))
    assert vecs.shape == (2, 128)
    assert np.allclose(vecs, LLM(str(tiny_bert), backend="numpy").embed(["one", "two"]), atol=1e-6)
    res = CliRunner().invoke(cli, ["embed", "-m", str(tiny_bert), "--backend", "numpy", "--pooling", "mean",
                                   "--no-normalize"], input="first line\n\nsecond line\n")
    assert res.exit_code == 0 and res.output.count("embedding ") == 2, res.output
    res = CliRunner().invoke(cli, ["embed", "-m", str(tiny_bert), "--backend", "numpy"], input="")
    assert res.exit_code == 1 and "no text" in res.output


@pytest.mark.gpu
@pytest.mark.slow
def test_wgpu_embeddings_match_numpy(tiny_bert, tmp_path, dev):
    from oxigpu.synth import synthesize
    texts = ["hello world", "The capital of France is Paris.", "x"]
    for path in (tiny_bert, synthesize("tiny-nomic-bert", tmp_path / "n.gguf", "Q8_0", seed=2, workers=1).path):
        a = LLM(str(path), backend="numpy").embed(texts)
        b = LLM(str(path), backend="wgpu").embed(texts)
        assert np.abs(a - b).max() < 1e-4


def test_async_llm_serves_embeddings_of_an_embedding_model(tiny_bert):
    """What /v1/embeddings calls: texts and token-id lists; generation models are refused there."""
    import asyncio

    from oxigpu.aio import AsyncLLM

    async def run():
        async with AsyncLLM(str(tiny_bert), backend="numpy") as llm:
            return await llm.embed(["hello world", [101, 657, 102]])
    got = asyncio.run(run())
    ref = LLM(str(tiny_bert), backend="numpy")
    assert np.allclose(got[0], ref.embed("hello world")) and np.allclose(got[1], ref.embed([[101, 657, 102]])[0])
