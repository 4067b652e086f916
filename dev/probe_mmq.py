"""An MMQ-style decode-batch GEMM on Dawn's integer subgroup matrices: Q4_K weights unpacked to int8 in
workgroup memory, x quantized to int8 per 32 (as the GEMV's x), i8 x i8 -> i32 products of 16 x 16 x 32,
each scaled by its 32-block's weight and x scales through workgroup memory (a subgroup matrix's elements
are not addressable) and summed in f32 per lane. The question behind issue 23's B = 16 and 64 rows: the
f16 matrix-unit GEMM is bound by staging f16 weights and the multi-row GEMV by its x loads.

    DAWN_TOGGLES=vulkan_enable_f16_on_nvidia python3 dev/probe_mmq.py [M,M ...] [N] [K]   # GPU machine

Checked against float64 (the dequantized weights times the int8 x as the kernel sees it), then timed
(weights larger than the L2, so streamed from memory as in a decode step).
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from probe_dawn import bind, gpu_time, instance, mma_device, pipeline  # noqa: E402

from oxigpu.quant import dequantize, quantize  # noqa: E402

COMMON = """@group(0) @binding(0) var<storage, read> X: array<i32>;
@group(0) @binding(1) var<storage, read> XS: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> W4: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;
fn nib_lo(v: vec4<u32>) -> vec4<i32> { return bitcast<vec4<i32>>(v & vec4<u32>(0x0F0F0F0Fu)); }
fn nib_hi(v: vec4<u32>) -> vec4<i32> { return bitcast<vec4<i32>>((v >> vec4<u32>(4u)) & vec4<u32>(0x0F0F0F0Fu)); }
fn put4(o: u32, v: vec4<i32>) { ws[o] = v.x; ws[o + 1u] = v.y; ws[o + 2u] = v.z; ws[o + 3u] = v.w; }
// Byte i of the 12 scale bytes (words s0, s1, s2 of the block's header after d, dmin).
fn sb(s: vec3<u32>, i: u32) -> u32 { return (s[i / 4u] >> (8u * (i % 4u))) & 0xFFu; }
// Sub-block j's 6-bit scale and min (ggml's get_scale_min_k4).
fn scale_min(s: vec3<u32>, j: u32) -> vec2<u32> {
  if (j < 4u) { return vec2<u32>(sb(s, j) & 63u, sb(s, j + 4u) & 63u); }
  return vec2<u32>((sb(s, j + 4u) & 0xFu) | ((sb(s, j - 4u) >> 6u) << 4u),
                   (sb(s, j + 4u) >> 4u) | ((sb(s, j) >> 6u) << 4u));
}
"""
"""What every form shares: the bindings (x int8, its scales and sums, the Q4_K rows, y), the nibble and
scale unpacking (each form declares its own ``ws``, the staged int8 weights ``put4`` writes)."""

SRC = """diagnostic(off, chromium.subgroup_matrix_uniformity);
enable chromium_experimental_subgroup_matrix;
// Y[m, n] = sum_k x[m, k] W[n, k]: x int8 [M][K] (X, 4 a word) with per-32 scales dx and dx-scaled sums sx
// (XS: [M][K / 32] pairs); W Q4_K rows (144-byte blocks). Workgroup: 4 subgroups, a 16 FM x 64 tile; each
// subgroup owns 16 columns and all FM row blocks. Per 256-k block: the 64 rows' nibbles to int8 in ws
// ([n][k], padded), their 8 sub-block scales d sc and dmin m in wsc / wmn; per 32-k sub-block j and row
// block f: C = X_f,j x W_j (i32), stored to the subgroup's cs slot, and each lane adds its 8 elements
// scaled: acc += f32(C) dx dsc - sx dmin m.
const M = {M}u;
const N = {N}u;
const K = {K}u;
const FM = {FM}u;
const NBK = K / 256u;            // Q4_K blocks per row
const RV = NBK * 9u;             // vec4 per row (144 bytes a block)
const LDW = 272u;                // int8 per staged row: 256 and 16 of padding
var<workgroup> ws: array<i32, 64u * LDW / 4u>;
var<workgroup> wsc: array<f32, 512>;      // [n][j]
var<workgroup> wmn: array<f32, 512>;
var<workgroup> cs: array<i32, 1024>;      // a 16 x 16 slot per subgroup

{COMMON}
@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let n0 = wid.x * 64u;
  let m0 = wid.y * 16u * FM;
  let sg = lid / 32u;
  let e = lid % 32u;
  let r = lid / 2u;            // the staged row of this lane (2 lanes a row)
  let h = lid % 2u;            // its half: sub-block pairs 2h, 2h + 1
  var acc: array<f32, 32>;     // [f][t]: element t * 32 + e of row block f (row 2t + e / 16, column e % 16)
  for (var b = 0u; b < NBK; b++) {
    let base = (n0 + r) * RV + b * 9u;
    let hd = W4[base];
    let q0 = W4[base + 1u + 4u * h]; let q1 = W4[base + 2u + 4u * h];
    let q2 = W4[base + 3u + 4u * h]; let q3 = W4[base + 4u + 4u * h];
    workgroupBarrier();          // the last block's ws and scales are read by every subgroup
    // qs vec4 i of pair p = i / 2: low nibbles are sub-block 2p's k 16 (i % 2) .., high ones 2p + 1's
    let o = r * (LDW / 4u) + 32u * h;        // word of k = 128 h (sub-block 4h's first)
    let a0 = nib_lo(q0); let a1 = nib_hi(q0); let a2 = nib_lo(q1); let a3 = nib_hi(q1);
    ws[o + 0u] = a0.x; ws[o + 1u] = a0.y; ws[o + 2u] = a0.z; ws[o + 3u] = a0.w;
    ws[o + 4u] = a2.x; ws[o + 5u] = a2.y; ws[o + 6u] = a2.z; ws[o + 7u] = a2.w;
    ws[o + 8u] = a1.x; ws[o + 9u] = a1.y; ws[o + 10u] = a1.z; ws[o + 11u] = a1.w;
    ws[o + 12u] = a3.x; ws[o + 13u] = a3.y; ws[o + 14u] = a3.z; ws[o + 15u] = a3.w;
    let b0 = nib_lo(q2); let b1 = nib_hi(q2); let b2 = nib_lo(q3); let b3 = nib_hi(q3);
    ws[o + 16u] = b0.x; ws[o + 17u] = b0.y; ws[o + 18u] = b0.z; ws[o + 19u] = b0.w;
    ws[o + 20u] = b2.x; ws[o + 21u] = b2.y; ws[o + 22u] = b2.z; ws[o + 23u] = b2.w;
    ws[o + 24u] = b1.x; ws[o + 25u] = b1.y; ws[o + 26u] = b1.z; ws[o + 27u] = b1.w;
    ws[o + 28u] = b3.x; ws[o + 29u] = b3.y; ws[o + 30u] = b3.z; ws[o + 31u] = b3.w;
    let dd = unpack2x16float(hd.x);
    let s = hd.yzw;
    for (var jj = 0u; jj < 4u; jj++) {
      let j = 4u * h + jj;
      let sm = scale_min(s, j);
      wsc[r * 8u + j] = dd.x * f32(sm.x);
      wmn[r * 8u + j] = dd.y * f32(sm.y);
    }
    workgroupBarrier();
    for (var j = 0u; j < 8u; j++) {
      let bm = subgroupMatrixLoad<subgroup_matrix_right<i8, 16, 32>>(&ws, sg * 16u * LDW + 32u * j, true, LDW);
      let dw = wsc[(sg * 16u + e % 16u) * 8u + j];
      let mw = wmn[(sg * 16u + e % 16u) * 8u + j];
      for (var f = 0u; f < FM; f++) {
        let am = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>>(&X, (m0 + 16u * f) * K + b * 256u + 32u * j,
                                                                      false, K);
        subgroupMatrixStore(&cs, sg * 256u, subgroupMatrixMultiply<i32>(am, bm), false, 16u);
        workgroupBarrier();
        for (var t = 0u; t < 8u; t++) {
          let m = m0 + 16u * f + 2u * t + e / 16u;
          let xs = XS[m * (K / 32u) + b * 8u + j];
          acc[f * 8u + t] += f32(cs[sg * 256u + t * 32u + e]) * (xs.x * dw) - xs.y * mw;
        }
        workgroupBarrier();
      }
    }
  }
  for (var f = 0u; f < FM; f++) {
    for (var t = 0u; t < 8u; t++) {
      let m = m0 + 16u * f + 2u * t + e / 16u;
      Y[m * N + n0 + sg * 16u + e % 16u] = acc[f * 8u + t];
    }
  }
}
"""


def src2(m: int, n: int, k: int, fm: int, tn: int, sync: bool) -> str:
    """The second form: x and the weights both staged per 256-k block (one barrier pair a block), TN column
    blocks per subgroup, every tile of a sub-block stored before any is read; ``sync``: a barrier pair
    around the reads (else none: a subgroup reads only its own slot, right after its own stores)."""
    bn, bm = 64 * tn, 16 * fm
    tiles = [(f, t) for f in range(fm) for t in range(tn)]
    acc = [f"a{f}_{t}_{i}" for f, t in tiles for i in range(8)]
    L = []
    L.append(f"""diagnostic(off, chromium.subgroup_matrix_uniformity);
enable chromium_experimental_subgroup_matrix;
const N = {n}u;
const K = {k}u;
const NBK = K / 256u;
const RV = NBK * 9u;
const LDW = 272u;
const BN = {bn}u;
const BM = {bm}u;
const NT = {len(tiles)}u;
var<workgroup> ws: array<i32, BN * LDW / 4u>;
var<workgroup> xs: array<i32, BM * LDW / 4u>;
var<workgroup> wsc: array<f32, BN * 8u>;
var<workgroup> wmn: array<f32, BN * 8u>;
var<workgroup> xsc: array<vec2<f32>, BM * 8u>;
var<workgroup> cs: array<i32, 4u * NT * 256u>;
{COMMON}// Row r's half h (sub-blocks 4h .. 4h + 3) of block b: nibbles to int8, scales.
fn stage_w(n0: u32, b: u32, r: u32, h: u32) {{
  let base = (n0 + r) * RV + b * 9u;
  let hd = W4[base];
  let q0 = W4[base + 1u + 4u * h]; let q1 = W4[base + 2u + 4u * h];
  let q2 = W4[base + 3u + 4u * h]; let q3 = W4[base + 4u + 4u * h];
  let o = r * (LDW / 4u) + 32u * h;
  put4(o, nib_lo(q0)); put4(o + 4u, nib_lo(q1)); put4(o + 8u, nib_hi(q0)); put4(o + 12u, nib_hi(q1));
  put4(o + 16u, nib_lo(q2)); put4(o + 20u, nib_lo(q3)); put4(o + 24u, nib_hi(q2)); put4(o + 28u, nib_hi(q3));
  let dd = unpack2x16float(hd.x);
  let s = hd.yzw;
  for (var jj = 0u; jj < 4u; jj++) {{
    let j = 4u * h + jj;
    let sm = scale_min(s, j);
    wsc[r * 8u + j] = dd.x * f32(sm.x);
    wmn[r * 8u + j] = dd.y * f32(sm.y);
  }}
}}
@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{
  let n0 = wid.x * BN;
  let m0 = wid.y * BM;
  let sg = lid / 32u;
  let e = lid % 32u;
  let slot = sg * NT * 256u;
  var {" = 0.0; var ".join(acc)} = 0.0;
  for (var b = 0u; b < NBK; b++) {{
    workgroupBarrier();
    for (var p = 0u; p < BN / 64u; p++) {{ let i = lid + 128u * p; stage_w(n0, b, i / 2u, i % 2u); }}
    for (var p = 0u; p < BM / 2u; p++) {{
      let w = lid + 128u * p;
      xs[(w / 64u) * (LDW / 4u) + w % 64u] = X[(m0 + w / 64u) * (K / 4u) + b * 64u + w % 64u];
    }}
    for (var i = lid; i < BM * 8u; i += 128u) {{
      let j = i / BM; let r = i % BM;
      xsc[i] = XS[(m0 + r) * (K / 32u) + b * 8u + j];
    }}
    workgroupBarrier();
    for (var j = 0u; j < 8u; j++) {{""")
    for t in range(tn):
        L.append(f"      let b{t} = subgroupMatrixLoad<subgroup_matrix_right<i8, 16, 32>>(&ws, (sg * {16 * tn}u + {16 * t}u) * LDW + 32u * j, true, LDW);")
    for f in range(fm):
        L.append(f"      let x{f} = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>>(&xs, {16 * f}u * LDW + 32u * j, false, LDW);")
    for i, (f, t) in enumerate(tiles):
        L.append(f"      subgroupMatrixStore(&cs, slot + {256 * i}u, subgroupMatrixMultiply<i32>(x{f}, b{t}), false, 16u);")
    if sync:
        L.append("      workgroupBarrier();")
    for t in range(tn):
        L.append(f"      let nl{t} = sg * {16 * tn}u + {16 * t}u + e % 16u;")
        L.append(f"      let dw{t} = wsc[nl{t} * 8u + j]; let mw{t} = wmn[nl{t} * 8u + j];")
    for f in range(fm):
        for i in range(8):
            L.append(f"      let xv{f}_{i} = xsc[j * BM + {16 * f + 2 * i}u + e / 16u];")
    for q, (f, t) in enumerate(tiles):
        for i in range(8):
            L.append(f"      a{f}_{t}_{i} += f32(cs[slot + {256 * q + 32 * i}u + e]) * (xv{f}_{i}.x * dw{t}) - xv{f}_{i}.y * mw{t};")
    if sync:
        L.append("      workgroupBarrier();")
    L.append("    }\n  }")
    for f, t in tiles:
        for i in range(8):
            L.append(f"  Y[(m0 + {16 * f + 2 * i}u + e / 16u) * N + n0 + sg * {16 * tn}u + {16 * t}u + e % 16u] = a{f}_{t}_{i};")
    L.append("}")
    return "\n".join(L)


def src3(m: int, n: int, k: int, fm: int, sync: bool, splits: int = 1) -> str:
    """The third form: half-block stages (128 k: 4 sub-blocks), a 16 FM x 128 tile (2 column blocks a
    subgroup, one weight row a lane), the next stage's weights and x read into registers while this one's
    products run, and each tile's products read back from the subgroup's own slot right after its store
    (``sync``: a barrier pair around each sub-block's reads instead). ``splits``: split-k, workgroup z
    summing its share of the stages into its own copy of Y (the caller adds them)."""
    bm = 16 * fm
    tiles = [(f, t) for f in range(fm) for t in range(2)]
    acc = [f"a{f}_{t}_{i}" for f, t in tiles for i in range(8)]
    xw = bm * 32 // 128          # x words a lane stages per stage
    L = [f"""diagnostic(off, chromium.subgroup_matrix_uniformity);
enable chromium_experimental_subgroup_matrix;
const N = {n}u;
const K = {k}u;
const NST = K / 128u;            // stages (half blocks)
const SPL = {splits}u;
const M = {m}u;
const RV = (K / 256u) * 9u;
const LDW = 144u;                // int8 a staged row: 128 and 16 of padding
const BM = {bm}u;
var<workgroup> ws: array<i32, 128u * LDW / 4u>;
var<workgroup> xs: array<i32, BM * LDW / 4u>;
var<workgroup> wsc: array<vec2<f32>, 128u * 4u>;       // [n][jj]: d sc, dmin m
var<workgroup> xsc: array<vec2<f32>, BM * 4u>;         // [jj][m]: dx, sx
var<workgroup> cs: array<i32, {4 * 256 * (len(tiles) if sync else 1)}u>;
var<private> wq: array<vec4<u32>, 5>;                  // the next stage: header, 4 qs vec4 (this lane's row)
var<private> xq: array<i32, {xw}>;
var<private> xc: array<vec2<f32>, 2>;
{COMMON}fn fetch(n0: u32, m0: u32, st: u32, lid: u32) {{
  let b = st / 2u; let h = st % 2u;
  let base = (n0 + lid) * RV + b * 9u;
  wq[0] = W4[base];
  for (var i = 0u; i < 4u; i++) {{ wq[1u + i] = W4[base + 1u + 4u * h + i]; }}
  for (var i = 0u; i < {xw}u; i++) {{
    let w = lid + 128u * i;
    xq[i] = X[(m0 + w / 32u) * (K / 4u) + st * 32u + w % 32u];
  }}
  for (var i = 0u; i < 2u; i++) {{
    let q = lid + 128u * i;
    if (q < BM * 4u) {{ xc[i] = XS[(m0 + q % BM) * (K / 32u) + st * 4u + q / BM]; }}
  }}
}}
fn stage(st: u32, lid: u32) {{
  let h = st % 2u;
  let o = lid * (LDW / 4u);
  put4(o, nib_lo(wq[1])); put4(o + 4u, nib_lo(wq[2])); put4(o + 8u, nib_hi(wq[1])); put4(o + 12u, nib_hi(wq[2]));
  put4(o + 16u, nib_lo(wq[3])); put4(o + 20u, nib_lo(wq[4])); put4(o + 24u, nib_hi(wq[3])); put4(o + 28u, nib_hi(wq[4]));
  let dd = unpack2x16float(wq[0].x);
  let s = wq[0].yzw;
  for (var jj = 0u; jj < 4u; jj++) {{
    let j = 4u * h + jj;
    let sm = scale_min(s, j);
    wsc[lid * 4u + jj] = vec2<f32>(dd.x * f32(sm.x), dd.y * f32(sm.y));
  }}
  for (var i = 0u; i < {xw}u; i++) {{
    let w = lid + 128u * i;
    xs[(w / 32u) * (LDW / 4u) + w % 32u] = xq[i];
  }}
  for (var i = 0u; i < 2u; i++) {{
    let q = lid + 128u * i;
    if (q < BM * 4u) {{ xsc[q] = xc[i]; }}
  }}
}}
@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{
  let n0 = wid.x * 128u;
  let m0 = wid.y * BM;
  let sg = lid / 32u;
  let e = lid % 32u;
  let slot = sg * {256 * (len(tiles) if sync else 1)}u;
  var {" = 0.0; var ".join(acc)} = 0.0;
  let s0 = wid.z * (NST / SPL);
  let s1 = s0 + NST / SPL;
  fetch(n0, m0, s0, lid);
  for (var st = s0; st < s1; st++) {{
    workgroupBarrier();
    stage(st, lid);
    workgroupBarrier();
    if (st + 1u < s1) {{ fetch(n0, m0, st + 1u, lid); }}
    for (var jj = 0u; jj < 4u; jj++) {{"""]
    for t in range(2):
        L.append(f"      let b{t} = subgroupMatrixLoad<subgroup_matrix_right<i8, 16, 32>>(&ws, (sg * 32u + {16 * t}u) * LDW + 32u * jj, true, LDW);")
        L.append(f"      let w{t} = wsc[(sg * 32u + {16 * t}u + e % 16u) * 4u + jj];")
    for f in range(fm):
        L.append(f"      let x{f} = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>>(&xs, {16 * f}u * LDW + 32u * jj, false, LDW);")
        for i in range(8):
            L.append(f"      let xv{f}_{i} = xsc[jj * BM + {16 * f + 2 * i}u + e / 16u];")
    if sync:
        for q, (f, t) in enumerate(tiles):
            L.append(f"      subgroupMatrixStore(&cs, slot + {256 * q}u, subgroupMatrixMultiply<i32>(x{f}, b{t}), false, 16u);")
        L.append("      workgroupBarrier();")
        for q, (f, t) in enumerate(tiles):
            for i in range(8):
                L.append(f"      a{f}_{t}_{i} += f32(cs[slot + {256 * q + 32 * i}u + e]) * (xv{f}_{i}.x * w{t}.x) - xv{f}_{i}.y * w{t}.y;")
        L.append("      workgroupBarrier();")
    else:
        for f, t in tiles:
            L.append(f"      subgroupMatrixStore(&cs, slot, subgroupMatrixMultiply<i32>(x{f}, b{t}), false, 16u);")
            for i in range(8):
                L.append(f"      a{f}_{t}_{i} += f32(cs[slot + {32 * i}u + e]) * (xv{f}_{i}.x * w{t}.x) - xv{f}_{i}.y * w{t}.y;")
    L.append("    }\n  }")
    for f, t in tiles:
        for i in range(8):
            L.append(f"  Y[wid.z * M * N + (m0 + {16 * f + 2 * i}u + e / 16u) * N + n0 + sg * 32u + {16 * t}u + e % 16u] = a{f}_{t}_{i};")
    L.append("}")
    return "\n".join(L)


def quantize_x(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """int8 x per 32 (round to nearest, scale max|x| / 127), its scales and dx-scaled sums."""
    m, k = x.shape
    b = x.reshape(m, k // 32, 32).astype(np.float32)
    d = np.abs(b).max(-1) / np.float32(127)
    q = np.round(b / np.where(d > 0, d, 1)[..., None]).astype(np.int8)
    s = d * q.astype(np.float32).sum(-1)
    return q.reshape(m, k), d.astype(np.float32), s.astype(np.float32)


def main() -> None:
    ms = [int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "16,64").split(",")]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 28672
    k = int(sys.argv[3]) if len(sys.argv) > 3 else 4096
    forms = sys.argv[4].split(",") if len(sys.argv) > 4 else ["v1", "f1t2s", "f1t2n"]
    wgpu, _ = instance()
    dev = mma_device(wgpu)
    rng = np.random.default_rng(0)
    distinct = 256                      # distinct quantized rows, tiled to n (cheap to build)
    raw = quantize(rng.standard_normal((distinct, k), np.float32), "Q4_K")
    wq = np.tile(raw, (n // distinct, 1))
    wd = dequantize(raw, "Q4_K").astype(np.float64)
    for m in ms:
        x = rng.standard_normal((m, k)).astype(np.float32)
        xq, dx, sx = quantize_x(x)
        xs = np.stack([dx, sx], -1).astype(np.float32)
        ref = (xq.astype(np.float64) * np.repeat(dx, 32, axis=1)) @ wd.T       # (m, distinct)
        for form in forms:
            if form == "v1":
                src = SRC.replace("{COMMON}", COMMON).replace("{M}", str(m)).replace("{N}", str(n)) \
                    .replace("{K}", str(k)).replace("{FM}", str(m // 16))
                groups = (n // 64, 1, 1)
            elif form.startswith("g"):      # g<FM><s|n>[k<splits>]: the third form
                fm, sync = int(form[1]), form[2] == "s"
                splits = int(form.split("k")[1]) if "k" in form else 1
                if m % (16 * fm):
                    continue
                src = src3(m, n, k, fm, sync, splits)
                groups = (n // 128, m // (16 * fm), splits)
            else:      # f<FM>t<TN><s|n>
                fm, tn, sync = int(form[1]), int(form[3]), form[4] == "s"
                if m % (16 * fm):
                    continue
                src = src2(m, n, k, fm, tn, sync)
                groups = (n // (64 * tn), m // (16 * fm), 1)
            pipe = pipeline(dev, src, f"mmq {form} M={m}")
            if pipe is None:
                continue
            y = np.zeros(groups[2] * m * n, np.float32)
            bufs, bg = bind(wgpu, dev, pipe, [xq.view(np.int32), xs, wq.view(np.uint32), y])
            t = gpu_time(wgpu, dev, pipe, bg, groups, reps=5)
            got = np.frombuffer(dev.queue.read_buffer(bufs[3]), np.float32).reshape(groups[2], m, n).sum(0)
            err = max(np.abs(got[:, i * distinct:(i + 1) * distinct] - ref).max() for i in (0, n // distinct - 1)) \
                / np.abs(ref).max()
            gb = wq.nbytes / 1e9
            print(f"mmq {form} Q4_K M={m} N={n} K={k}: {t * 1e6:.1f} us, {gb / t:.0f} GB/s of weights, "
                  f"{2 * m * n * k / t / 1e12:.1f} TOP/s, rel err {err:.2e}", flush=True)


if __name__ == "__main__":
    main()
