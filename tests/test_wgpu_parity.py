"""Acceptance on the real models: the wgpu backend generates what the numpy backend generates.

Per model: 32 greedy tokens (where they part, numpy's top-2 gap at that step must be < 0.01), 16 tokens at
temperature 0.8 with a fixed seed (identical), and teacher-forced logits over the prompt + the greedy
tokens within 1e-2 x max |logit| per position. Generation goes through the Engine, so the wgpu side
exercises the GPU-resident decode loop (sample kernel feeding embed, ids read back in batches).

That is with float math (``OXIGPU_INT8_DOTS=0``, the CPU adapters' default). Hardware adapters multiply
large decode GEMVs and the prefill GEMMs by int8 activations (``Device.int8_dots``, as llama.cpp's GPU and
CPU backends do): a second test forces that path here, per token (the GEMVs) and in 64-row chunks (the
GEMMs), and holds it to what 8-bit activations allow as measured on lavapipe (its docstring).

The wgpu side runs in a subprocess with LP_NUM_THREADS=2: lavapipe decodes these models ~3.5x faster with
two threads than with the single thread conftest sets for the many-small-dispatch tests. Qwen's prompt is
evaluated one token at a time (prefill_chunk=1): lavapipe's tiled GEMM takes ~20 s per 16-token chunk on
its Q5_0 FFN, while gemma3 uses 16-token chunks, so the GEMM path is covered on a real model too.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

pytestmark = [pytest.mark.realmodel, pytest.mark.gpu, pytest.mark.slow]

PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time"
N_CTX = 128
GREEDY = 32
SAMPLED = 16
SEED = 1234
CHUNK = {"gemma3": 16, "qwen": 1}


def _tokens(engine, prompt: list[int]) -> tuple[list[int], list[int]]:
    """The greedy and the seeded-sampled generation of ``prompt``."""
    from oxigpu.runtime.params import SamplingParams
    runs = []
    for params in (SamplingParams(max_tokens=GREEDY, temperature=0),
                   SamplingParams(max_tokens=SAMPLED, temperature=0.8, seed=SEED)):
        gen = engine.start(prompt, params)
        for _ in gen:
            pass
        runs.append(gen.result.token_ids)
    return runs[0], runs[1]


def _teacher_forced(engine, tokens: list[int]) -> np.ndarray:
    return np.concatenate(list(engine.eval_all(tokens)))


def _worker(path: str, chunk: int, out: str) -> None:
    """Subprocess entry: the wgpu side, written to ``out`` (npz)."""
    from oxigpu.runtime.engine import Engine
    engine = Engine(path, backend="wgpu", n_ctx=N_CTX, prefill_chunk=chunk)
    prompt = engine.tokenizer.encode(PROMPT)
    greedy, sampled = _tokens(engine, prompt)
    np.savez(out, prompt=prompt, greedy=greedy, sampled=sampled, logits=_teacher_forced(engine, prompt + greedy))


def _run_wgpu(path: Path, chunk: int, tmp_path: Path, int8: bool = False) -> dict[str, np.ndarray]:
    out = tmp_path / "wgpu.npz"
    env = {**os.environ, "LP_NUM_THREADS": "2", "OXIGPU_INT8_DOTS": str(int(int8))}
    res = subprocess.run([sys.executable, __file__, str(path), str(chunk), str(out)], env=env,
                         capture_output=True, text=True, timeout=600)
    if res.returncode != 0 and "DeviceError" in res.stderr:
        pytest.skip(f"no wgpu adapter: {res.stderr.strip().splitlines()[-1]}")
    assert res.returncode == 0, res.stderr
    with np.load(out) as z:
        return dict(z)


class _Parity(NamedTuple):
    """One model on both backends: the wgpu run, numpy's own sampled tokens, numpy's teacher-forced logits
    on the GPU's greedy sequence, their max |difference| per row and the worst of it relative to the row's
    max |logit|, and where the greedy tokens first part (step, row of the logits) or None."""

    gpu: dict[str, np.ndarray]
    sampled: list[int]
    ref: np.ndarray
    err: np.ndarray
    worst: float
    parted: tuple[int, int] | None


def _against_numpy(which: str, request, tmp_path: Path, int8: bool, chunk: int | None = None) -> _Parity:
    from oxigpu.runtime.engine import Engine
    path = request.getfixturevalue(f"{which}_path")
    gpu = _run_wgpu(path, chunk or CHUNK[which], tmp_path, int8)
    engine = Engine(path, backend="numpy", n_ctx=N_CTX)
    prompt = engine.tokenizer.encode(PROMPT)
    assert gpu["prompt"].tolist() == prompt
    greedy, sampled = _tokens(engine, prompt)
    # teacher forcing on the sequence the GPU produced: numpy's logits at every step of that generation
    ref = _teacher_forced(engine, prompt + gpu["greedy"].tolist())
    err = np.abs(gpu["logits"] - ref).max(axis=1)
    worst = float((err / np.abs(ref).max(axis=1)).max())
    got = gpu["greedy"].tolist()
    j = next((i for i, (a, b) in enumerate(zip(got, greedy)) if a != b), None)
    return _Parity(gpu, sampled, ref, err, worst, None if j is None else (j, len(prompt) - 1 + j))


def _top2_gap(ref: np.ndarray, row: int) -> float:
    top2 = np.sort(ref[row])[-2:]
    return float(top2[1] - top2[0])


@pytest.mark.parametrize("which", ["gemma3", "qwen"])
def test_wgpu_generates_what_numpy_generates(which, request, tmp_path):
    r = _against_numpy(which, request, tmp_path, int8=False)
    assert r.worst <= 1e-2, f"teacher-forced logits differ by {r.worst:.3g} x max |logit|"
    if r.parted:
        j, row = r.parted
        assert _top2_gap(r.ref, row) < 0.01, (f"greedy tokens part at step {j} where numpy's top-2 gap is "
                                              f"{_top2_gap(r.ref, row):.4f}")
    assert r.gpu["sampled"].tolist() == r.sampled


@pytest.mark.parametrize("which", ["gemma3", "qwen"])
@pytest.mark.parametrize("chunk,bound", [(1, 3e-2), (64, 1e-1)], ids=["gemv", "gemm"])
def test_wgpu_int8_dots_stay_near_numpy(which, chunk, bound, request, tmp_path):
    """Integer dots (x rounded to int8 per 32, as llama.cpp's CUDA GEMV and MMQ GEMM round q8_1
    activations): teacher-forced logits within ``bound`` x max |logit|, and greedy tokens that part from
    numpy's only where numpy's top-2 gap is within twice the logit error measured at that step (a flip
    the error explains). Seeded samples are not compared: any logit change may move a draw.

    One token per eval ("gemv") measures the decode's integer-dot GEMVs: gemma3 2.9e-2, qwen 1.7e-2 on
    lavapipe. 64-row chunks ("gemm", the whole sequence in one) measure the prefill GEMM, where every
    matmul rounds x: gemma3 7.7e-2 (median over rows 2.4e-2), qwen 3.4e-2; numpy with x rounded the same
    way lands at 6-7e-2 on gemma3, so this is the rounding, not the kernel (its twin checks are exact to
    f32 in test_kernel_gemm.py)."""
    r = _against_numpy(which, request, tmp_path, int8=True, chunk=chunk)
    assert 0 < r.worst <= bound, f"teacher-forced logits differ by {r.worst:.3g} x max |logit|"
    if r.parted:
        j, row = r.parted
        assert _top2_gap(r.ref, row) <= 2 * r.err[row], (f"greedy tokens part at step {j} where numpy's top-2 "
                                                         f"gap {_top2_gap(r.ref, row):.4f} exceeds twice the "
                                                         "logit error")


if __name__ == "__main__":
    _worker(sys.argv[1], int(sys.argv[2]), sys.argv[3])
