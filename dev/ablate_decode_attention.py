"""Where the batched decode attention's time goes: the production kernel (shaders/attention_decode.wgsl, as
rope_kv_attention runs it on a decode batch: one row per sequence, paged caches) timed with one part taken
out at a time (results wrong on purpose), as dev/ablate_attention_mma.py found the prefill attention's
softmax conflicts. Also the kernel's time against its bytes (the K and V rows it must read).

    python3 dev/ablate_decode_attention.py [--batch 64] [--pos 576] [--heads 32:8] [--dim 128] [--ctx KEYS]
        [--shapes 'sg1:split_group=1,rows4:decode_rows=4;key_slices=2'] [--only-shapes]

Ablations (line drops / edits of the expanded source): ``no_kv_load`` (the pass's K and V loads: zero
rows), ``no_exp`` (exp(x) -> x), ``no_barrier`` (workgroup and storage barriers), ``one_split`` (MAXS
1: every row block in one workgroup, no partials or merge: the split count's cost or gain), ``no_tsum`` (the
scores' team sums), ``no_pv`` (the P V products), ``deep2`` (not an ablation: the K and V loads two passes
ahead instead of one; single-split workgroups only). ``--gqa``: the grouped-query kernel's instead
(attention_decode_gqa.wgsl): ``no_own`` (the own key's write and barrier), ``early`` (the first pass loaded
before that write), ``no_qrope`` (q unrotated), ``one_split``, ``no_kv_load`` (every key from row 0). Needs a
GPU.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ablation import ablate, drop  # noqa: E402
from bench_gemv import time_variants  # noqa: E402

from oxigpu.backends.wgpu.device import Device, Params  # noqa: E402
from oxigpu.backends.wgpu.kernel import prepare  # noqa: E402
from oxigpu.backends.wgpu.ops._common import Batch  # noqa: E402
from oxigpu.backends.wgpu.ops.rope_attention import paged_rope_kv_attention_case  # noqa: E402

ABLATIONS = {
    "full": lambda src: src,
    "no_kv_load": drop(r"^\s+p\.[kv][ab][01] = [kv]4\("),
    "no_exp": lambda src: src.replace("exp(", "("),
    "no_barrier": lambda src: re.sub(r"\b(workgroupBarrier|storageBarrier)\(\);", "", src),
    "one_split": lambda src: re.sub(r"const MAXS: u32 = \d+u;", "const MAXS: u32 = 1u;", src),
    "no_tsum": drop(r"^\s+(if \(KB > 4u\) \{ )?s[ab] = team_sum4\(lane, sgs, s[ab]\);"),
    "no_pv": lambda src: src.replace("t0 = t0 + pv(z, pb, widen_v4(cur.vb0))", "t0 = t0").replace(
        "var t0 = pv(z, pa, widen_v4(cur.va0));", "var t0 = pa;"),
    "deep2": lambda src: src.replace(   # the loads two passes ahead instead of one (one split a workgroup)
        "if (kend > ks) { cur = load_pass(bt.s, ks + slice * KB, kend - 1u, kvh, kc0, kc1, vc0, vc1); }",
        "var nx1: Pass;\n  if (kend > ks) { cur = load_pass(bt.s, ks + slice * KB, kend - 1u, kvh, kc0, kc1, vc0, vc1);"
        " nx1 = load_pass(bt.s, ks + slice * KB + BLK, kend - 1u, kvh, kc0, kc1, vc0, vc1); }").replace(
        "let nxt = load_pass(bt.s, nj, nlast,", "let nxt = load_pass(bt.s, nj + BLK, nlast,").replace(
        "cur = nxt;", "cur = nx1;\n      nx1 = nxt;"),
}

_OWN = ("  split_start(lane, sgs, rw, team, tl, kvh, rw, true, min(range.x + s1 * kps, range.y));\n"
        "  if (OWN_KEY) { storageBarrier(); }\n")
_FIRST = "  if (ke > ks) { c = load_pass(rw.s, ks + team * KB, ke - 1u, kvh, tl); }\n"
GQA_ABLATIONS = {   # the grouped-query kernel (shaders/attention_decode_gqa.wgsl; --gqa)
    "full": lambda src: src,
    "no_own": lambda src: src.replace(_OWN, "  if (P.n_seqs == 4000000000u) {\n" + _OWN + "  }\n"),   # never runs
    "early": lambda src: src.replace(_OWN, "").replace(_FIRST, _FIRST + _OWN),   # first loads before the write
    "no_qrope": lambda src: src.replace("x = q_col(p, (t * NH + kvh * G) * D4 + i / D4 * D4, i % D4);",
                                        "x = q[(t * NH + kvh * G) * D4 + i];"),
    "one_split": lambda src: re.sub(r"const MAXS: u32 = \d+u;", "const MAXS: u32 = 1u;", src),
    "no_kv_load": lambda src: re.sub(r"(p\.[kv]\d+ = [kv]_raw\()pj\d\[\d\]\.[xyzw]", r"\g<1>0u", src),  # row 0
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--pos", type=int, default=576, help="mean position (rows spread over +-32)")
    ap.add_argument("--heads", default="32:8", help="query heads:KV heads")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=0,
                    help="keys a sequence's block table holds (default: 1024, or --pos + 64 where that is more)")
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--shapes", default="", help="launch shapes timed beside (unablated), e.g. "
                    "'sg1:split_group=1,ks2:key_slices=2,rows4:decode_rows=4,kb4:team_keys=4' (ops/attention.py attrs)")
    ap.add_argument("--only-shapes", action="store_true", help="the full kernel and --shapes, no ablations")
    ap.add_argument("--gqa", action="store_true", help="ablate the grouped-query kernel (attention_decode_gqa.wgsl)")
    args = ap.parse_args()
    H, Hkv = (int(v) for v in args.heads.split(":"))
    B, D = args.batch, args.dim
    ctx = args.ctx or max(1024, args.pos + 64)
    if ctx < args.pos + 32:
        ap.error(f"--ctx {ctx} holds no room for rows at --pos {args.pos} (+-32)")
    blocks = -(-ctx // 32)
    b = Batch([(s, args.pos - 32 + (s * 7) % 64, 1) for s in range(B)], B, blocks, B * blocks)
    case = paged_rope_kv_attention_case("decode batch", b, H, Hkv, D, seed=1)
    dev = Device.get()
    plain = dev.shader_source
    dss, names = [], []
    shader, table = ("attention_decode_gqa.wgsl", GQA_ABLATIONS) if args.gqa else ("attention_decode.wgsl", ABLATIONS)
    for abl, edit in table.items():
        if args.only_shapes and abl != "full":
            continue
        ablate(dev, plain, shader, abl, edit)
        dss.append(prepare(case.op, case.inputs, case.attrs, case.in_types, dev).dispatches)
        names.append(abl)
    dev.shader_source = plain
    for spec in filter(None, args.shapes.split(",")):
        name, _, kv = spec.partition(":")
        attrs = {**case.attrs, **{k: int(v) for k, v in (e.split("=") for e in kv.split(";"))}}
        dss.append(prepare(case.op, case.inputs, attrs, case.in_types, dev).dispatches)
        names.append(name)
    dev.write_params(Params(pos=0, n_tokens=B, n_seqs=B))
    secs = time_variants(dev, dss, args.copies)
    n_kv = sum(int(p) + 1 for p in b.positions[:B])
    gb = 2 * n_kv * Hkv * 2 * D / 1e9     # K and V rows, f16
    print(f"B={B} pos~{args.pos} H={H}/{Hkv} D={D}: {gb * 1e3:.1f} MB of K and V")
    for abl, s in zip(names, secs):
        print(f"  {abl:11} {s * 1e6:8.1f} us  {gb / s:7.1f} GB/s")


if __name__ == "__main__":
    main()
