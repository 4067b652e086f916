"""The README's table of supported architectures and quant types, generated from the registries
(`models.registry.FAMILIES`; the quant types' rows from `quant.support.rows`: `quant.TYPES`, the WGSL
snippets under shaders/quant/ and the GPU kernels' type tables).

    python -m oxigpu.models.support        # rewrite the table in README.md (between its markers)
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..quant.support import rows as quant_rows
from .family import Family
from .registry import FAMILIES

BEGIN, END = "<!-- support-table:begin (python -m oxigpu.models.support) -->", "<!-- support-table:end -->"


def _kind(f: Family) -> str:
    if f.encoder:
        return f"encoder (embeddings, {f.pooling} pooling)"
    if f.moe is not None and f.moe.required:
        return "mixture of experts"
    if f.moe is not None:
        return "decoder; mixture of experts when the file has experts"
    return "decoder"


def _traits(f: Family) -> str:
    t = ["absolute positions" if not f.rope else "NEOX RoPE" if f.rope_neox else "RoPE"]
    if f.norm == "layer":
        t.append("LayerNorm")
    if f.qkv_bias:
        t.append("q/k/v biases")
    if f.qk_norm:
        t.append("q/k norms " + ("per head" if f.qk_norm == "head" else "over all heads"))
    if not f.pre_norms:
        t.append("no pre-norms")
    if f.post_norms:
        t.append("post-norms")
    if f.fused_gate_up:
        t.append("fused gate/up")
    t.append(f"{'' if f.gated else 'ungated '}{f.act.replace('_tanh', '')}")
    if f.embed_scale:
        t.append("scaled embeddings")
    if f.softcaps[0] is not None or f.softcaps[1] is not None:
        t.append("soft-caps")
    if f.swa is not None:
        where = "every layer" if f.swa.pattern == 0 else f"{f.swa.pattern - 1} of {f.swa.pattern} layers"
        t.append(f"sliding window on {where}" + ("" if f.swa.window else " when the file sets one"))
    if f.moe is not None:
        t.append("top-k experts" + (", renormalized" if f.moe.norm_topk else ""))
    return ", ".join(t)


def markdown() -> str:
    from ..synth import SHAPES
    shapes: dict[str, list[str]] = {}
    for s in SHAPES.values():
        if s.name.startswith("tiny-"):
            shapes.setdefault(s.arch, []).append(f"`{s.name}`")
    rows = ["| architecture | kind | what its block has | `oxigpu synth` test shapes |", "|---|---|---|---|"]
    rows += [f"| `{name}` | {_kind(f)} | {_traits(f)} | {', '.join(shapes.get(name, []))} |"
             for name, f in FAMILIES.items()]
    quant = quant_rows()
    gpu = [r["name"] for r in quant if r["gpu"]]
    cpu = [r["name"] for r in quant if not r["gpu"]]
    rows.append(f"| quant types | wgpu and numpy backends | {', '.join(gpu)} | |")
    if cpu:
        rows.append(f"| quant types | numpy backend only | {', '.join(cpu)} | |")
    int8 = [r["name"] for r in quant if r["int8"]]
    rows.append(f"| quant types | integer dots (int8 x) in the GPU's GEMV and GEMM | {', '.join(int8)} | |")
    mmv = [r["name"] for r in quant if r["mmv"]]
    rows.append(f"| quant types | decode batches of 9-16 rows on the matrix units' own kernel (`gemm_mmv`) | "
                f"{', '.join(mmv)} | |")
    return "\n".join(rows)


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
