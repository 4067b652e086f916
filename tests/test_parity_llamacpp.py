"""Whole-model parity of the numpy backend with llama.cpp (teacher forcing, recorded fixtures).

Fixtures come from dev/make_parity_fixtures.py: llama.cpp's own tokenization of a fixed text and its
logits at 256 ids per position (its top 32 plus a fixed random sample of the vocabulary), from two runs:
- "exact": the same weights dequantized to F32 by llama.cpp, F32 KV cache: llama.cpp's float path, the
  computation we implement. Required: max |logit diff| <= min(TOL_EXACT, REL * s) and the same top-1
  wherever llama.cpp's top-2 gap exceeds min(GAP, 10 * REL * s), where s is the std of the stored logits
  (TOL_EXACT 0.1, GAP 0.5, REL 1%): the synthetic models' random weights give logits with s ~ 0.3, so
  absolute bounds alone would say nothing there.
- "shipped": the file as it is. llama.cpp's CPU kernels then quantize activations to 8 bits (and keep
  an f16 KV cache), which moves its logits by up to ~1.6 on gemma3 270M (logits span about +-35) and
  ~0.6 on Qwen2.5 0.5B, against its own float path. Required: the same top-1 wherever the shipped top-2
  gap exceeds GAP, and max |ours - shipped| <= max |exact - shipped| + the exact bound: we are no
  further from shipped llama.cpp than llama.cpp's own float path is.
We feed the tokens through our graph in prefill chunks of 64 (the last one padded).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from oxigpu.backends.base import Step
from oxigpu.backends.numpy_backend import NumpyBackend
from oxigpu.gguf import GGUFFile
from oxigpu.graph.plan import compile
from oxigpu.models import build_graph

FIXTURES = Path(__file__).parent / "fixtures" / "parity"
CASES = sorted(p.stem for p in FIXTURES.glob("*.npz"))
GAP = 0.5
TOL_EXACT = 0.1
REL = 0.01
CHUNK = 64
REAL = {"gemma3-270m": "gemma3_path", "qwen2.5-coder-0.5b": "qwen_path", "smollm2-135m": "smollm2_path"}


def teacher_forced(path: Path, tokens: np.ndarray, ids: np.ndarray,
                   n_ctx: int) -> tuple[np.ndarray, np.ndarray]:
    """Our logits at ``ids[t]`` and our argmax for every position t, running the tokens in padded chunks."""
    model = GGUFFile(path)
    plan = compile(build_graph(model, None, CHUNK, n_ctx, "all"))
    backend = NumpyBackend(model, n_ctx)
    out, top = np.empty(ids.shape, np.float32), np.empty(len(tokens), np.int64)
    for pos in range(0, len(tokens), CHUNK):
        n = min(CHUNK, len(tokens) - pos)
        logits = backend.run(plan, Step.single(tokens[pos:pos + n], pos))["logits"]
        out[pos:pos + n] = np.take_along_axis(logits[:n], ids[pos:pos + n], 1)
        top[pos:pos + n] = logits[:n].argmax(1)
    return out, top


def _model_file(name: str, fx, request, tmp_path_factory) -> Path:
    if str(fx["source"]) == "real":
        return request.getfixturevalue(REAL[name])
    from oxigpu.synth import synthesize
    shape, ftype, seed = (str(s) for s in fx["synth"])
    path = tmp_path_factory.mktemp("synth") / f"{name}.gguf"
    synthesize(shape, path, ftype=ftype, seed=int(seed), workers=1)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != str(fx["sha256"]):
        pytest.fail(f"oxigpu.synth no longer writes the file this fixture was recorded from ({shape}, {ftype}, "
                    f"seed {seed}); rerun dev/make_parity_fixtures.py --only {name}")
    return path


@pytest.mark.parametrize("name", [pytest.param(c, marks=[pytest.mark.realmodel, pytest.mark.slow])
                                  if c in REAL else c for c in CASES])
def test_parity_with_llamacpp(name, request, tmp_path_factory):
    fx = np.load(FIXTURES / f"{name}.npz")
    path = _model_file(name, fx, request, tmp_path_factory)
    ours, our_top = teacher_forced(path, fx["tokens"], fx["ids"], int(fx["n_ctx"]))
    exact, shipped = fx["exact_values"], fx["shipped_values"]

    spread = float(exact.std(axis=1).mean())
    tol = min(TOL_EXACT, REL * spread)
    report, failures = [f"logit std {spread:.3f}"], []
    for run, ref in (("exact", exact), ("shipped", shipped)):
        top_vals = fx[f"{run}_top2_values"]
        gap = min(GAP, 10 * REL * spread) if run == "exact" else GAP
        clear = (top_vals[:, 0] - top_vals[:, 1]) > gap
        agree = our_top == fx[f"{run}_top2_ids"][:, 0]
        diff = np.abs(ours - ref)
        bound = tol if run == "exact" else float(np.abs(exact - shipped).max()) + tol
        report.append(f"{run}: top-1 {agree[clear].sum()}/{clear.sum()} positions with gap > {gap:.3f} "
                      f"({agree.mean():.1%} of {len(agree)}), max|diff| {diff.max():.4f} (bound {bound:.3f}), "
                      f"mean {diff.mean():.4f}")
        if not agree[clear].all():
            failures.append(f"{run}: top-1 differs at clear positions {np.flatnonzero(clear & ~agree)[:10]}")
        if diff.max() > bound:
            failures.append(f"{run}: max |logit diff| {diff.max():.3f} > {bound:.3f} at position "
                            f"{np.unravel_index(diff.argmax(), diff.shape)[0]}")
    print(f"\n{name}: " + "; ".join(report))
    assert not failures, "; ".join(failures)
