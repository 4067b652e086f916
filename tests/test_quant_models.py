"""Whole models of every quant type as llama.cpp writes them, against llama.cpp (opt-in: the files are
made by ``dev/make_quant_fixtures.py models --out DIR``, which needs llama-cpp-python; CI does not build
llama.cpp). Run with ``OXIGPU_QUANT_MODELS=DIR``.

Per file: the numpy backend's teacher-forced logits against llama.cpp's with the bounds of
tests/test_parity_llamacpp.py (its float path on the file dequantized to F32 by llama.cpp: within
min(0.1, 1% of the logits' std), the same top-1 where its top-2 gap is clear; its shipped path, whose
CPU kernels round activations to 8 bits: no further from it than its own float path is), and the wgpu
backend against numpy (prefill chunks and decode steps, the relative bound of test_wgpu_backend.py).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from test_parity_llamacpp import GAP, REL, TOL_EXACT, teacher_forced

from oxigpu.backends.numpy_backend import NumpyBackend
from oxigpu.gguf import GGUFFile
from oxigpu.graph.plan import compile
from oxigpu.models import build_graph

DIR = os.environ.get("OXIGPU_QUANT_MODELS")
FILES = sorted(Path(DIR).glob("*.gguf")) if DIR else []
pytestmark = pytest.mark.skipif(not DIR, reason="OXIGPU_QUANT_MODELS=DIR not set (dev/make_quant_fixtures.py models)")
WGPU_REL = 1e-3


def _types(path: Path) -> set[str]:
    from oxigpu.quant import get_type
    return {get_type(t.ggml_type).name for t in GGUFFile(path).tensors.values()}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_numpy_matches_llamacpp(path):
    fx = np.load(path.with_suffix(".npz"))
    ours, our_top = teacher_forced(path, fx["tokens"], fx["ids"], int(fx["n_ctx"]))
    exact, shipped = fx["exact_values"], fx["shipped_values"]
    spread = float(exact.std(axis=1).mean())
    tol = min(TOL_EXACT, REL * spread)
    failures = []
    for run, ref in (("exact", exact), ("shipped", shipped)):
        top_vals = fx[f"{run}_top2_values"]
        gap = min(GAP, 10 * REL * spread) if run == "exact" else GAP
        clear = (top_vals[:, 0] - top_vals[:, 1]) > gap
        agree = our_top == fx[f"{run}_top2_ids"][:, 0]
        bound = tol if run == "exact" else float(np.abs(exact - shipped).max()) + tol
        diff = float(np.abs(ours - ref).max())
        print(f"{path.stem} {run}: max|diff| {diff:.4f} (bound {bound:.4f}), top-1 {agree[clear].sum()}/{clear.sum()}")
        if not agree[clear].all() or diff > bound:
            failures.append(f"{run}: max |diff| {diff:.4f} (bound {bound:.4f}), top-1 at clear positions "
                            f"{agree[clear].sum()}/{clear.sum()}")
    assert not failures, f"{path.stem} ({sorted(_types(path))}): " + "; ".join(failures)


@pytest.mark.gpu
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_wgpu_matches_numpy(dev, path):
    from oxigpu.backends.wgpu.backend import WgpuBackend
    model = GGUFFile(path)
    toks = np.asarray(np.load(path.with_suffix(".npz"))["tokens"][:24], np.int32)
    n_ctx = 64
    prefill = compile(build_graph(model, None, 8, n_ctx, "all"))
    decode = compile(build_graph(model, None, 1, n_ctx, "last"))
    nb, wb = NumpyBackend(model, n_ctx), WgpuBackend(model, n_ctx, dev)
    rel = lambda a, b: float(np.abs(a - b).max() / np.abs(b).max())
    for pos in range(0, 16, 8):
        ins = {"tokens": toks[pos:pos + 8]}
        ref = nb.run(prefill, ins, pos, 8)["logits"]
        assert rel(wb.run(prefill, ins, pos, 8)["logits"], ref) <= WGPU_REL
    for pos in range(16, 24):
        ins = {"tokens": toks[pos:pos + 1]}
        assert rel(wb.run(decode, ins, pos, 1)["logits"], nb.run(decode, ins, pos, 1)["logits"]) <= WGPU_REL


def test_manifest_names_every_file():
    manifest = json.loads((Path(DIR) / "manifest.json").read_text())
    assert {p.name for p in FILES} <= set(manifest)
