"""Where the matrix-unit prefill attention's time goes: the production kernel (shaders/attention_mma.wgsl)
timed with one part of its tile loop taken out at a time (results wrong on purpose; only the time
differences mean something), as llm.c's dev/cuda experiments separate a kernel's costs.

    python3 dev/ablate_attention_mma.py [--cases pos=4096] [--tiles 4:32,4:32/u-1] [--copies 5]

Ablations (text edits of the expanded shader source): ``no_kload`` (cache loads replaced by their index:
no memory traffic), ``no_kstore`` / ``no_vstore`` (the f16 staging stores of K / V), ``no_smma`` (all but
the first k step of S = Q K^T), ``no_pv`` (O += P V), ``no_softmax`` (P = S, no maximum, no exp: the
scores are still read), ``no_barrier`` (every workgroupBarrier); ``direct_k`` / ``direct_kv``: K (and V)
fragments read by the matrix loads straight from the cache instead of staged (the contiguous cases only);
``bufview``: the staging through a WGSL ``buffer`` (16-byte stores; its output must equal the full kernel's).
Needs Dawn with subgroup matrices (the H100 / H200).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ablation import ablate, drop  # noqa: E402
from bench_attention_mma import CASES  # noqa: E402
from bench_gemv import time_variants  # noqa: E402

from oxigpu.backends.wgpu.device import Device, Params  # noqa: E402
from oxigpu.backends.wgpu.ops.attention import Attention, attention_case  # noqa: E402

ABLATIONS = {
    "full": lambda src: src,
    "no_kload": lambda src: src.replace(   # (j never is 0xFFFFFFFF: the caches keep their bindings)
        "v = kv8(phys(tile_seq, j), kvh, e % W8, V);",
        "v = vec4<u32>(j); if (j == 0xFFFFFFFFu) { v = kv8(0u, kvh, 0u, V); }"),
    "no_kstore": drop(r"store8\(lid.*false\);"),
    "no_vstore": drop(r"store8\(lid.*true\);"),
    "no_smma": drop(r"^\s+s\d+ = subgroupMatrixMultiplyAccumulate"),
    "no_pv": drop(r"o\d+ = subgroupMatrixMultiplyAccumulate\(pa"),
    "no_softmax": lambda src: re.sub(r"exp\((v_\d+) - m\)", r"\1", drop(r"mt = max\(mt, v_\d+\);")(src)),
    "no_barrier": lambda src: src.replace("workgroupBarrier();", ""),
}

_RIGHT = r"subgroupMatrixLoad<(subgroup_matrix_right<f16, 16, 16>)>\(&kv, (\d+)u \* LD \+ (\d+)u, {major}, LD\)"


def _direct(src: str, v: bool) -> str:
    """K (or V) fragments loaded by each subgroup straight from the cache (bound as halves), not staged
    through workgroup memory: the cache loads and staging stores go, the products read the cache rows.
    Contiguous caches whose tiles start at multiples of 16 keys only (the pos=... cases): timing, not a kernel."""
    name, dim, flag, major = ("cache_v", "DV", "true", "false") if v else ("cache_k", "D", "false", "true")
    src = src.replace(f"var<storage, read> {name}: array<MW>;", f"var<storage, read> {name}: array<f16>;")
    src = src.replace(f"return {name}[(row * NKV + kvh) * ({dim} / 8u) + c8];", "return vec4<u32>(0u);")
    src = src.replace(f"return {name}[i / 4u][i % 4u];", "return 0u;")
    src = drop(rf"r{'v' if v else 'k'}\d+ = load8\(|store8\(lid.*{flag}\);")(src)
    return re.sub(_RIGHT.format(major=major), lambda mt: (
        f"subgroupMatrixLoad<{mt[1]}>(&{name}, (phys(tile_seq, k0 + {mt[2]}u) * NKV + kvh) * {dim} + {mt[3]}u, "
        f"{major}, NKV * {dim})"), src)


def _buffer_view(src: str) -> str:
    """kv as a WGSL ``buffer`` (language feature buffer_view): each lane's 16 staged bytes of K or V one
    vec4 store instead of eight 16-bit ones; the matrix loads and the Q staging through an f16 view. The
    same results (the tool compares its output with the full kernel's)."""
    c = {k: int(v) for k, v in re.findall(r"const (NSG|BK|D|DV): u32 = (\d+)u;", src)}
    n = max(16 * c["NSG"], c["BK"]) * (max(c["D"], c["DV"]) + 8)
    view = f"bufferView<array<f16, {n}>>(&kvb, 0)"
    src = src.replace("enable chromium_experimental_subgroup_matrix;",
                      "enable chromium_experimental_subgroup_matrix;\nrequires buffer_view;")
    src = src.replace("var<workgroup> kv: array<f16, max(BQ, BK) * LD>;", f"var<workgroup> kvb: buffer<{2 * n}>;")
    src = src.replace("""  for (var i = 0u; i < 4u; i++) {
    let h = bitcast<vec2<f16>>(v[i]);
    kv[o + 2u * i] = h.x;
    kv[o + 2u * i + 1u] = h.y;
  }""", f"  (*bufferView<array<vec4<u32>, {n // 8}>>(&kvb, 0))[o / 8u] = v;")
    return re.sub(r"\bkv\[", f"(*{view})[", src.replace("(&kv,", f"({view},"))


ABLATIONS |= {
    "direct_k": lambda src: _direct(src, False),
    "direct_kv": lambda src: _direct(_direct(src, False), True),
    "bufview": _buffer_view,
}
EXACT = ("bufview",)
"""Rewrites that keep the results: their output is compared with the full kernel's."""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="pos=4096")
    ap.add_argument("--tiles", default="4:32,4:32/u-1")
    ap.add_argument("--copies", type=int, default=5)
    ap.add_argument("--only", default="", help="these ablations only (comma list; full is always timed)")
    args = ap.parse_args()
    only = ["full"] + [a for a in args.only.split(",") if a and a != "full"] if args.only else list(ABLATIONS)
    dev = Device.get()
    plain = dev.shader_source
    for name, T, n_tok, pos, H, Hkv, D, n_ctx, extra, _ in CASES:
        if not any(c in name for c in args.cases.split(",")):
            continue
        case = attention_case(name, T, n_tok, pos, H, Hkv, D, n_ctx, seed=1, **extra)
        bufs = [dev.upload(a) for a in case.inputs]
        out = dev.upload(np.zeros((T, H * D), np.float32))
        for t in args.tiles.split(","):
            tile, _, units = t.partition("/u")
            dss = []
            for abl in only:
                edit = ABLATIONS[abl]
                ablate(dev, plain, "attention_mma.wgsl", abl, edit)
                k = Attention(dev, case.attrs | {"prefill_mma": tile, "prefill_units": int(units or 0)},
                              [x.shape for x in case.inputs], case.in_types, [(T, H * D)])
                dss.append(k.encode([*bufs, out]))
            dev.shader_source = plain
            dev.write_params(Params(pos=pos, n_tokens=n_tok))
            outs = {}
            for abl, d in zip(only, dss):
                if abl == "full" or abl in EXACT:
                    dev.submit(d)
                    outs[abl] = dev.read(out, np.float32, (T, H * D))
            same = " ".join(f"{a}: {'same bits' if np.array_equal(o, outs['full']) else 'DIFFERENT'}"
                            for a, o in outs.items() if a != "full")
            secs = time_variants(dev, dss, args.copies)
            print(f"{name:34} {t:10} " + "  ".join(f"{a} {s * 1e6:7.1f}" for a, s in zip(only, secs)) + f"  {same}",
                  flush=True)


if __name__ == "__main__":
    main()
