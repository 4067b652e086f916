"""Where each quant type runs, from the registries: the quant registry (`TYPES`, `QUANTIZABLE`), the WGSL
snippets under shaders/quant/ and the GPU kernels' type tables (ops/matmul.py `TYPES`, `GEMV_PIECES`;
ops/gemm.py `Q8_TYPES`, `MMA_TYPES`, `MMV_TYPES`). The README's supported-models table takes its quant rows from
`rows` (oxigpu/models/support.py).

    python -m oxigpu.quant.support        # print the per-type table (markdown)
"""
from __future__ import annotations

from importlib.resources import files

from .codec import QUANTIZABLE
from .registry import TYPES


def rows() -> list[dict[str, object]]:
    """Per registered type: its layout and the GPU paths it runs on."""
    from ..backends.wgpu.ops.gemm import MMA_TYPES, MMV_TYPES, Q8_TYPES
    from ..backends.wgpu.ops.matmul import GEMV_PIECES, Q8X_PIECES
    from ..backends.wgpu.ops.matmul import TYPES as GPU_TYPES
    out = []
    for name, qt in TYPES.items():
        gpu = files("oxigpu.shaders").joinpath("quant", qt.wgsl_file).is_file() and name in GPU_TYPES
        piece = GEMV_PIECES.get(name) or ("q32" if name in Q8_TYPES else None)
        int8 = [f"GEMV (`{piece}` piece)"] if gpu and piece in Q8X_PIECES else []
        int8 += ["GEMM"] if gpu and name in Q8_TYPES else []
        out.append(dict(name=name, bits=qt.bits_per_weight, block=qt.block_size, gpu=gpu, int8=", ".join(int8),
                        mma=gpu and name in MMA_TYPES, mmv=gpu and name in MMV_TYPES, quantize=name in QUANTIZABLE))
    return out


def markdown() -> str:
    yes = lambda b: "yes" if b else "-"
    lines = ["| type | bits/weight | block | GPU: GEMV, GEMM, embedding | integer dots | matrix-unit GEMM | "
             "matrix-unit decode batches (`gemm_mmv`) | numpy quantizer |", "|---|---|---|---|---|---|---|---|"]
    for r in rows():
        lines.append(f"| {r['name']} | {r['bits']:.4g} | {r['block']} | {yes(r['gpu'])} | {r['int8'] or '-'} | "
                     f"{yes(r['mma'])} | {yes(r['mmv'])} | {yes(r['quantize'])} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
