"""Single-core speed of the numpy (de)quantizers: `python -m oxigpu.tools.quant_bench [--quick]`.

Dequantization is reported as MB/s of float32 output, quantization as elements/s of input.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from ..quant.codec import QUANTIZABLE, dequantize, quantize
from ..quant.registry import TYPES


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="smaller tensors, one repeat")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    rows, cols = (256, 4096) if args.quick else (4096, 4096)
    repeat = 1 if args.quick else 3
    x = (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)
    print(f"{'type':8} {'dequant MB/s':>13} {'quantize Melem/s':>17}   ({rows} x {cols})")
    for name, qt in TYPES.items():
        if name in QUANTIZABLE:
            n_q = rows if qt.block_size < 256 or args.quick else rows // 8
            t_q = _best(lambda n_q=n_q, qt=qt: quantize(x[:n_q], qt), repeat)
            raw = quantize(x, qt)
            speed = f"{n_q * cols / t_q / 1e6:17.2f}"
        else:  # dequantize-only types: random bytes, masked so every f16 field is finite
            raw = rng.integers(0, 256, (rows, qt.row_bytes(cols)), dtype=np.uint8) & np.uint8(0x3B)
            speed = f"{'-':>17}"
        t_d = _best(lambda raw=raw, qt=qt: dequantize(raw, qt), repeat)
        print(f"{name:8} {x.nbytes / t_d / 1e6:13.0f} {speed}")


if __name__ == "__main__":
    main()
