"""A kernel experiment apart from the product (llm.c's dev/cuda style): one-token decode attention in which one
team of L lanes takes every query row of a KV head (G rows), so each K and V row is loaded and widened once
for the G rows instead of once per row (shaders/attention_decode.wgsl gives each row a team of its own).

Per pass a team takes KB = L / G keys: the G x KB partial scores of each lane are summed over the team by a
transposed butterfly (31 shuffles at L = 32: lane i ends with the total of pair i = (row i / KB, key i %
KB)), so each lane computes one exp; the probabilities and the rows' rescale factors reach every lane by
shuffles (L + G), and each lane accumulates its vec4 column of O for the G rows. A workgroup is one team and
one split of the keys; a second dispatch merges the splits. Contiguous f16 or q8_0 caches (`--ctk`; q8_0
columns dequantized as loaded, as the product's kv/cols_true.wgsl does), no window, soft cap or paging: the
question is only whether sharing the loads beats the production kernel's per-row teams at long contexts
(docs/perf-log.md, fifteenth session).

    python3 dev/decode_gqa.py [--pos 32768] [--heads 32:8] [--dim 128] [--splits 64,128,256] [--ctk f16|q8_0]
        [--copies 20]

Checks each variant (and the production kernel) against the float64 reference, then times them side by
side (the production: the attention op, T = 1, at the same n_ctx; over q8_0 caches through an identity
block table, so both read the same rows). Needs subgroups of at least L = D / 4 lanes: the H100 /
H200 take D 128 (32 lanes); lavapipe's 8-lane subgroups check the same generated code at D 32 (`--dim 32
--heads 8:2`, `4:2`, `8:1`: G 4, 2, 8).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_gemv import time_variants  # noqa: E402

from oxigpu.backends.wgpu.device import Device, Dispatch, Params  # noqa: E402
from oxigpu.backends.wgpu.kernel import prepare  # noqa: E402
from oxigpu.backends.wgpu.ops.attention import attention_case  # noqa: E402

TEMPLATE = """
const D4: u32 = {D4}u;
const G: u32 = {G}u;
const KB: u32 = {KB}u;
const L: u32 = {L}u;
const NKV: u32 = {NKV}u;
const S: u32 = {S}u;
const SCALE: f32 = {SCALE};
const NEG_BIG: f32 = -3.0e38;
const PART: u32 = D4 + 1u;

@group(0) @binding(0) var<storage, read> nk: array<u32>;          // [n_keys]
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> ck: array<{CW}>;   // f16: [row][NKV][D4] packed halves; q8_0: words
@group(0) @binding(3) var<storage, read> cv: array<{CW}>;   // of ggml's 34-byte blocks, KROW a row
@group(0) @binding(4) var<storage, read_write> part: array<vec4<f32>>;
const KROW: u32 = {KROW}u;

fn h4(x: vec2<u32>) -> vec4<f32> {{ return vec4<f32>(unpack2x16float(x.x), unpack2x16float(x.y)); }}

{Q8FNS}
@compute @workgroup_size(L)
fn main(@builtin(subgroup_invocation_id) ln: u32, @builtin(workgroup_id) wid: vec3<u32>) {{
  let split = wid.x;
  let kvh = wid.y;
  let n = nk[0];
  let kps = ((n + S - 1u) / S + KB - 1u) / KB * KB;
  let lo = min(n, split * kps);
  let hi = min(n, lo + kps);
  let last = max(hi, 1u) - 1u;
{QLOAD}
  var m = NEG_BIG;            // the running maximum of this lane's row (row ln / KB)
  var ls = 0.0;               // this lane's share of its row's sum
{ODECL}
  var c = Pass();
  var j0 = lo;
  if (hi > lo) {{ c = load(j0, last, kvh, ln); }}
  for (; j0 < hi; j0 += KB) {{
    let nx = load(j0 + KB, last, kvh, ln);
{SCORES}
{REDUCE}
    let j = j0 + ln % KB;
    let sc = select(NEG_BIG, t, j < hi);
    var mt = sc;
{ROWMAX}
    let mn = max(m, mt);
    let alpha = exp(m - mn);
    let p = select(0.0, exp(sc - mn), j < hi);
    ls = ls * alpha + p;
    m = mn;
{PV}
    c = nx;
  }}
{ROWSUM}
  for (var r = 0u; r < G; r++) {{
    let mr = subgroupShuffle(m, r * KB);
    let lr = subgroupShuffle(ls, r * KB);
    let base = ((kvh * S + split) * G + r) * PART;
    if (ln == 0u) {{ part[base] = vec4<f32>(mr, lr, 0.0, 0.0); }}
{OSTORE}
  }}
}}

struct Pass {{ {PASS_FIELDS} }}

fn load(j0: u32, last: u32, kvh: u32, ln: u32) -> Pass {{
  var p: Pass;
{LOADS}
  return p;
}}
"""

Q8FNS = """
// q8_0: the vec4 of values e .. e + 3 of cache row `row`, dequantized (the product's kv/q8_0.wgsl, included
// before this, read as kv/cols_true.wgsl reads it)
fn q8k(row: u32, e: u32) -> vec4<f32> {
  let a = q8_0_at(e) + vec3<u32>(row * KROW);
  return q8_0_get4(ck[a.x], ck[a.y], ck[a.z], e);
}

fn q8v(row: u32, e: u32) -> vec4<f32> {
  let a = q8_0_at(e) + vec3<u32>(row * KROW);
  return q8_0_get4(cv[a.x], cv[a.y], cv[a.z], e);
}
"""

MERGE = """
const D4: u32 = {D4}u;
const G: u32 = {G}u;
const NKV: u32 = {NKV}u;
const S: u32 = {S}u;
const PART: u32 = D4 + 1u;
@group(0) @binding(0) var<storage, read> part: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> out: array<vec4<f32>>;

@compute @workgroup_size({D4})
fn main(@builtin(local_invocation_index) c: u32, @builtin(workgroup_id) wid: vec3<u32>) {{
  let r = wid.x;        // query row kvh * G + g
  let kvh = r / G;
  let g = r % G;
  var m = -3.0e38;
  for (var s = 0u; s < S; s++) {{ m = max(m, part[((kvh * S + s) * G + g) * PART].x); }}
  var l = 0.0;
  var o = vec4<f32>(0.0);
  for (var s = 0u; s < S; s++) {{
    let b = ((kvh * S + s) * G + g) * PART;
    let e = part[b];
    let w = select(exp(e.x - m), 0.0, e.y == 0.0);
    l += w * e.y;
    o += w * part[b + 1u + c];
  }}
  out[r * D4 + c] = o / l;
}}
"""


def kernel_source(D: int, G: int, NKV: int, S: int, ctype: str = "f16") -> tuple[str, str]:
    """The team kernel and the merge, with the unrolled parts written out (named values, no private arrays).
    ``ctype`` f16 or q8_0: both caches' type (q8_0 columns dequantized as they are loaded, as the product's
    kv/cols_true.wgsl does)."""
    D4 = D // 4
    L = D4
    if L & (L - 1) or L % G or L < G:
        raise ValueError(f"D {D}: a team of {L} lanes must split into G = {G} rows of keys")
    KB = L // G
    nb = L.bit_length() - 1                          # butterfly levels
    qload = "\n".join(f"  let q{r} = q[(kvh * G + {r}u) * D4 + ln] * SCALE;" for r in range(G))
    odecl = "\n".join(f"  var o{r} = vec4<f32>(0.0);" for r in range(G))
    if ctype == "f16":
        raw, widen, krow = "vec2<u32>", "h4", 0
        loads = "\n".join(f"  p.k{i} = ck[(min(j0 + {i}u, last) * NKV + kvh) * D4 + ln];\n"
                          f"  p.v{i} = cv[(min(j0 + {i}u, last) * NKV + kvh) * D4 + ln];" for i in range(KB))
    elif ctype == "q8_0":
        raw, widen, krow = "vec4<f32>", "", NKV * D // 32 * 34 // 4
        loads = "\n".join(f"  p.k{i} = q8k(min(j0 + {i}u, last), 4u * (kvh * D4 + ln));\n"
                          f"  p.v{i} = q8v(min(j0 + {i}u, last), 4u * (kvh * D4 + ln));" for i in range(KB))
    else:
        raise ValueError(f"cache type {ctype!r}: f16 or q8_0")
    fields = " ".join(f"k{i}: {raw}, v{i}: {raw}," for i in range(KB))
    # scores: pair index idx = r * KB + i, value x{idx}
    scores = []
    for i in range(KB):
        scores.append(f"    let kk{i} = {widen}(c.k{i});")
    for r in range(G):
        for i in range(KB):
            scores.append(f"    let x{r * KB + i} = dot(q{r}, kk{i});")
    # transposed butterfly over the idx bits, high to low: lane bit b keeps the half of idx bit b
    red, names, n = [], [f"x{i}" for i in range(L)], L
    for b in reversed(range(nb)):
        half, mask = n // 2, 1 << b
        red.append(f"    let hb{b} = (ln & {mask}u) != 0u;")
        new = []
        for a in range(half):
            lo_, hi_ = names[a], names[a + half]
            nm = f"y{b}_{a}"
            red.append(f"    let {nm} = select({lo_}, {hi_}, hb{b}) + subgroupShuffleXor(select({hi_}, {lo_}, hb{b}), "
                       f"{mask}u);")
            new.append(nm)
        names, n = new, half
    red.append(f"    let t = {names[0]};")
    rowmax = "\n".join(f"    mt = max(mt, subgroupShuffleXor(mt, {1 << b}u));" for b in range(KB.bit_length() - 1))
    pv = []
    for r in range(G):
        pv.append(f"    let a{r} = subgroupShuffle(alpha, {r * KB}u);")
    for i in range(KB):
        pv.append(f"    let vv{i} = {widen}(c.v{i});")
    for r in range(G):
        terms = " + ".join(f"subgroupShuffle(p, {r * KB + i}u) * vv{i}" for i in range(KB))
        pv.append(f"    o{r} = o{r} * a{r} + ({terms});")
    rowsum = "\n".join(f"  ls += subgroupShuffleXor(ls, {1 << b}u);" for b in range(KB.bit_length() - 1))
    ostore = "\n".join(f"    if (r == {r}u) {{ part[base + 1u + ln] = o{r}; }}" for r in range(G))
    src = TEMPLATE.format(D4=D4, G=G, KB=KB, L=L, NKV=NKV, S=S, SCALE=repr(float(1.0 / np.sqrt(D))),
                          CW="vec2<u32>" if ctype == "f16" else "u32", KROW=krow,
                          Q8FNS="" if ctype == "f16" else Q8FNS,
                          QLOAD=qload, ODECL=odecl, SCORES="\n".join(scores), REDUCE="\n".join(red),
                          ROWMAX=rowmax, PV="\n".join(pv), ROWSUM=rowsum, OSTORE=ostore, PASS_FIELDS=fields,
                          LOADS=loads)
    return src, MERGE.format(D4=D4, G=G, NKV=NKV, S=S)


def build(dev: Device, D: int, G: int, NKV: int, S: int, bufs: dict, ctype: str = "f16") -> list[Dispatch]:
    """The two dispatches of one variant over ``bufs`` (meta, q, ck, cv, part, out)."""
    src, merge = kernel_source(D, G, NKV, S, ctype)
    if ctype == "q8_0":                  # the product's block snippet (q8_0_at, q8_0_get4) ahead of the kernel
        src = dev.shader_source("kv/q8_0.wgsl") + "\n" + src
    if dev.implementation == "dawn":     # Tint wants the extension named (naga takes it silently)
        src = "enable subgroups;\ndiagnostic(off, subgroup_uniformity);\n" + src
    pipes = []
    for code, label in ((src, "decode_gqa"), (merge, "decode_gqa_merge")):
        module = dev.device.create_shader_module(code=code, label=label)
        pipes.append(dev.device.create_compute_pipeline(layout="auto", compute={"module": module,
                                                                               "entry_point": "main"}))
    main = Dispatch(pipes[0], dev.bind_group(pipes[0], {i: bufs[k] for i, k in
                                                        enumerate(("nk", "q", "ck", "cv", "part"))}), (S, NKV, 1))
    merge_d = Dispatch(pipes[1], dev.bind_group(pipes[1], {0: bufs["part"], 1: bufs["out"]}), (NKV * G, 1, 1))
    return [main, merge_d]


def _q8_case(H: int, Hkv: int, D: int, pos: int, n_ctx: int, seed: int = 3):
    """q, q8_0 caches of n_ctx rows, the float64 output of the row at ``pos``, and the production op's inputs
    (one sequence through an identity block table, so its cache rows are the contiguous kernel's)."""
    from oxigpu.backends.wgpu.ops._common import Batch
    from oxigpu.quant import kvcache as kvq
    blocks = -(-n_ctx // 32)
    b = Batch([(0, pos, 1)], 1, blocks, blocks)
    b.block_table = np.arange(blocks, dtype=np.int32).reshape(1, -1)
    g = np.random.default_rng(seed)
    q = g.standard_normal((1, H * D)).astype(np.float32)
    ck = kvq.quantize_rows((g.standard_normal((blocks * 32, Hkv * D)) * 2).astype(np.float32), "q8_0")
    cv = kvq.quantize_rows(g.standard_normal((blocks * 32, Hkv * D)).astype(np.float32), "q8_0")
    n = pos + 1
    K = kvq.dequantize_rows(ck[:n], "q8_0", Hkv * D).astype(np.float64)
    V = kvq.dequantize_rows(cv[:n], "q8_0", Hkv * D).astype(np.float64)
    G, scale = H // Hkv, D ** -0.5
    ref = np.empty(H * D)
    for h in range(H):
        kv = slice(h // G * D, (h // G + 1) * D)
        sc = K[:, kv] @ q[0, h * D:(h + 1) * D].astype(np.float64) * scale
        w = np.exp(sc - sc.max())
        ref[h * D:(h + 1) * D] = w @ V[:, kv] / w.sum()
    attrs = dict(n_head=H, n_head_kv=Hkv, head_dim=D, v_head_dim=D, scale=scale, block_size=32)
    inputs = [q, ck, cv, *b.inputs()]
    return q, ck, cv, ref, inputs, attrs, ["f32", "q8_0", "q8_0", "i32", "i32", "i32"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pos", type=int, default=32768)
    ap.add_argument("--heads", default="32:8", help="query heads:KV heads")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--splits", default="64,128,256")
    ap.add_argument("--ctk", default="f16", choices=["f16", "q8_0"], help="both caches' type")
    ap.add_argument("--copies", type=int, default=20)
    args = ap.parse_args()
    H, Hkv = (int(v) for v in args.heads.split(":"))
    D, G = args.dim, H // Hkv
    dev = Device.get()
    n_ctx = args.pos + 256
    n = args.pos + 1
    if args.ctk == "f16":
        case = attention_case("decode", 1, 1, args.pos, H, Hkv, D, n_ctx, seed=3)
        q, ck, cv = case.inputs
        ref = case.reference()[0][:1].reshape(-1)
        prod = prepare(case.op, case.inputs, case.attrs, case.in_types, dev)
        params = Params(pos=args.pos, n_tokens=1)
        nbytes = 2 * n * Hkv * D * 2
    else:
        q, ck, cv, ref, inputs, attrs, types = _q8_case(H, Hkv, D, args.pos, n_ctx)
        prod = prepare("attention", inputs, attrs, types, dev)
        params = Params(pos=0, n_tokens=1, n_seqs=1)
        nbytes = 2 * n * Hkv * D // 32 * 34
    bufs = {"nk": dev.upload(np.array([n, 0, 0, 0], np.uint32)), "q": dev.upload(q), "ck": dev.upload(ck),
            "cv": dev.upload(cv), "out": dev.upload(np.full(H * D, np.nan, np.float32))}
    print(f"device: {dev.info()['name']}; pos {args.pos}, H {H}/{Hkv}, D {D}, {args.ctk} caches: "
          f"{nbytes / 1e6:.1f} MB of K and V", flush=True)
    dev.write_params(params)
    dev.submit(prod.dispatches)
    got = dev.read(prod.out_bufs[0], np.float32, H * D)
    print(f"production: rel. error {float(np.abs(got - ref).max() / np.abs(ref).max()):.2e}", flush=True)
    names, dss = ["production"], [prod.dispatches]
    for s in (int(v) for v in args.splits.split(",")):
        bufs["part"] = dev.create_buffer(16 * Hkv * s * G * (D // 4 + 1), label="gqa partials")
        try:
            ds = build(dev, D, G, Hkv, s, bufs, args.ctk)
        except Exception as e:
            print(f"splits {s}: {e}", flush=True)
            continue
        dev.write(bufs["out"], np.full(H * D, np.nan, np.float32))
        dev.submit(ds)
        got = dev.read(bufs["out"], np.float32, H * D)
        err = float(np.abs(got - ref).max() / np.abs(ref).max())
        print(f"splits {s}: rel. error {err:.2e} {'ok' if err < 2e-5 else 'WRONG'}", flush=True)
        names.append(f"gqa s{s}")
        dss.append(ds)
    secs = time_variants(dev, dss, args.copies)
    for name, s in zip(names, secs):
        print(f"  {name:12} {s * 1e6:8.1f} us  {nbytes / 1e9 / s:7.1f} GB/s", flush=True)


if __name__ == "__main__":
    main()
