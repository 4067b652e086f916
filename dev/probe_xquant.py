"""How much accuracy int8 x costs, per block length: the real models' teacher-forced logits (the parity
fixtures' tokens, llama.cpp's logits) with every matmul's x rounded to int8 per BLOCK elements (scale
max|x| / 127 per block, as the GPU's integer-dot GEMV does per 32), against the float run and the parity
test's bounds. The question behind an integer matrix-unit GEMM that would take one x scale per 256
(docs/perf-log.md, sixth session): does a coarser x block still pass the parity tests?

    python3 dev/probe_xquant.py [BLOCK ...]      # default 0 (float), 32, 64, 256; CPU only (numpy backend)
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from test_parity_llamacpp import FIXTURES, GAP, REL, TOL_EXACT, teacher_forced  # noqa: E402

from oxigpu import model_packages  # noqa: E402
from oxigpu.backends import numpy_ops  # noqa: E402

F32 = np.float32
_matmul = numpy_ops.matmul


def int8_rows(x: np.ndarray, block: int) -> np.ndarray:
    """x with each run of ``block`` elements of a row rounded to int8 times its scale."""
    r, k = x.shape
    b = x.reshape(r, k // block, block)
    d = np.abs(b).max(-1, keepdims=True) / F32(127)
    q = np.round(b / np.where(d > 0, d, F32(1)))
    return (q * d).reshape(r, k).astype(F32)


def main() -> None:
    blocks = [int(v) for v in sys.argv[1:]] or [0, 32, 64, 256]
    models = {"gemma3-270m": model_packages.gemma3_270m, "qwen2.5-coder-0.5b": model_packages.qwen25_coder_05b}
    for name, find in models.items():
        try:
            path = find()
        except Exception as e:   # noqa: BLE001 - a model package not installed here
            print(f"{name}: skipped ({e})")
            continue
        fx = np.load(FIXTURES / f"{name}.npz")
        exact = fx["exact_values"]
        spread = float(exact.std(axis=1).mean())
        tol = min(TOL_EXACT, REL * spread)
        gap = min(GAP, 10 * REL * spread)
        clear = (fx["exact_top2_values"][:, 0] - fx["exact_top2_values"][:, 1]) > gap
        base = None
        for block in blocks:
            if block:
                def mm(x, w, bias=None, *, out=None, n_tokens=None, _b=block):
                    k = x.shape[1]
                    xq = int8_rows(x, _b) if k % _b == 0 else x
                    return _matmul(xq, w, bias, out=out, n_tokens=n_tokens)
                numpy_ops.matmul = mm
            else:
                numpy_ops.matmul = _matmul
            ours, top = teacher_forced(path, fx["tokens"], fx["ids"], int(fx["n_ctx"]))
            numpy_ops.matmul = _matmul
            if base is None:
                base = ours
            agree = top == fx["exact_top2_ids"][:, 0]
            diff = np.abs(ours - exact)
            print(f"{name} x {'float' if not block else f'int8 per {block}'}: max|diff| vs llama.cpp "
                  f"{diff.max():.4f} (parity bound {tol:.4f}), mean {diff.mean():.4f}; vs float max "
                  f"{np.abs(ours - base).max():.4f}; top-1 at clear positions {agree[clear].sum()}/{clear.sum()} "
                  f"({agree.mean():.1%} of all)", flush=True)


if __name__ == "__main__":
    main()
