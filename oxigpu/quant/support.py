"""The README's table of quant types, generated from the registries: the quant registry (`TYPES`,
`QUANTIZABLE`), the WGSL snippets under shaders/quant/ and the GPU kernels' type tables (ops/matmul.py
`TYPES`, `GEMV_PIECES`; ops/gemm.py `Q8_TYPES`, `MMA_TYPES`).

    python -m oxigpu.quant.support        # rewrite the table in README.md (between its markers)
"""
from __future__ import annotations

import sys
from importlib.resources import files
from pathlib import Path

from .codec import QUANTIZABLE
from .registry import TYPES

BEGIN, END = "<!-- quant-table:begin (python -m oxigpu.quant.support) -->", "<!-- quant-table:end -->"


def rows() -> list[dict[str, object]]:
    """Per registered type: its layout and the GPU paths it runs on."""
    from ..backends.wgpu.ops.gemm import MMA_TYPES, Q8_TYPES
    from ..backends.wgpu.ops.matmul import GEMV_PIECES, Q8X_PIECES
    from ..backends.wgpu.ops.matmul import TYPES as GPU_TYPES
    out = []
    for name, qt in TYPES.items():
        gpu = files("oxigpu.shaders").joinpath("quant", qt.wgsl_file).is_file() and name in GPU_TYPES
        piece = GEMV_PIECES.get(name) or ("q32" if name in Q8_TYPES else None)
        int8 = [f"GEMV (`{piece}` piece)"] if gpu and piece in Q8X_PIECES else []
        int8 += ["GEMM"] if gpu and name in Q8_TYPES else []
        out.append(dict(name=name, bits=qt.bits_per_weight, block=qt.block_size, gpu=gpu, int8=", ".join(int8),
                        mma=gpu and name in MMA_TYPES, quantize=name in QUANTIZABLE))
    return out


def markdown() -> str:
    yes = lambda b: "yes" if b else "-"
    lines = ["| type | bits/weight | block | GPU: GEMV, GEMM, embedding | integer dots | matrix-unit GEMM | "
             "numpy quantizer |", "|---|---|---|---|---|---|---|"]
    for r in rows():
        lines.append(f"| {r['name']} | {r['bits']:.4g} | {r['block']} | {yes(r['gpu'])} | {r['int8'] or '-'} | "
                     f"{yes(r['mma'])} | {yes(r['quantize'])} |")
    return "\n".join(lines)


def rewrite(readme: Path) -> bool:
    """Put the current table between the markers of ``readme``; True when the file changed."""
    text = readme.read_text(encoding="utf-8")
    i, j = text.index(BEGIN) + len(BEGIN), text.index(END)
    new = text[:i] + "\n" + markdown() + "\n" + text[j:]
    if new != text:
        readme.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "README.md"
    print(f"{path}: {'updated' if rewrite(path) else 'already current'}")
