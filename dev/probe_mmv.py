"""A decode-batch GEMM for 9-16 rows on the matrix units without a workgroup tile: each subgroup dequantizes
its own weight rows' Q4_K blocks to f16 (two weights an instruction, the 0x6400 | q trick of
gemm_mma/q4_kh.wgsl) into a slot of workgroup memory only it reads, and multiplies them by x's 16 rows read as
matrix fragments straight from storage (x is small and stays in the caches). The subgroups of a workgroup
share its weight rows and split k; one sum over them at the end. Issue 23's B = 16 on the 8B: its matrix-unit
GEMM (32 x 64 tiles, split-k, a barrier pair every 64 k) and the multi-row GEMV both take ~135 us for the gate
and up rows (66 MB, ~15 us of memory).

    DAWN_TOGGLES=vulkan_enable_f16_on_nvidia python3 dev/probe_mmv.py [--shapes glu,o,down] [--variants ...]

A variant is ``wx<T>s<S>k<splits>[ld<LDK>][-<ablation>...]`` (``source_wx``: x staged once a workgroup, S
subgroups on S x T 16-row tiles, split-k over workgroups; x two steps a barrier is gemm_mmv.wgsl's mmv_x2)
or ``tn<T>ks<S>[bv][ns]``: T 16-row tiles per subgroup, S subgroups a workgroup (k split S ways),
``bv``: the dequantized words stored as 16-byte words through a WGSL buffer view (else one f16 store a
weight), ``ns``: no barriers around a subgroup's own slot (it alone writes and reads it). x is staged in
``gemm_xh.wgsl``'s f16 with each group of 4 k stored as k0 k2 k1 k3 (the order in which two weights an
instruction come out of a nibble word), so the products pair the same k. Checked against float64 of the
weights as the shader rounds them (``ops/gemm.py half_dequant``) times the f16 x, then timed (weights larger
than the L2: streamed from memory as in a decode step).
"""
from __future__ import annotations

import argparse
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from probe_dawn import gpu_time, instance, mma_device, pipeline, run_once  # noqa: E402

from oxigpu.backends.wgpu.ops.gemm import half_dequant  # noqa: E402
from oxigpu.quant import get_type, quantize  # noqa: E402

SHAPES = {"glu": (28672, 4096), "head": (128256, 4096), "o": (4096, 4096), "down": (4096, 14336), "k": (1024, 4096),
          "glu1b": (16384, 2048), "o1b": (2048, 2048), "down1b": (2048, 8192)}
"""n weight rows, k: the 8B's and the 1B's Q4_K decode nodes (gate and up as one weight)."""

UNITS = """struct U { h: vec4<u32>, a: vec4<u32>, b: vec4<u32> }
var<private> ur: array<U, TN>;

fn sbyte(h: vec4<u32>, b: u32) -> u32 { return (h[1u + (b >> 2u)] >> (8u * (b & 3u))) & 0xFFu; }

// f16 of d sc and 8 d sc - dmin m of 32-block j (as gemm_mma/q4_kh.wgsl).
fn scales(h: vec4<u32>, j: u32) -> vec2<f16> {
  var sm = vec2<u32>(sbyte(h, j) & 63u, sbyte(h, j + 4u) & 63u);
  if (j >= 4u) {
    let hi = sbyte(h, j + 4u);
    sm = vec2<u32>((hi & 0xFu) | ((sbyte(h, j - 4u) >> 6u) << 4u), (hi >> 4u) | ((sbyte(h, j) >> 6u) << 4u));
  }
  let f = unpack2x16float(h.x) * vec2<f32>(sm);
  return vec2<f16>(f16(f.x), f16(8.0 * f.x - f.y));
}

fn h2(u: u32) -> vec2<f16> { return bitcast<vec2<f16>>(u); }
fn w2(v: vec2<f16>) -> u32 { return bitcast<u32>(v); }

// The 4 weights of nibble word w at k0 k2 k1 k3 order: two words.
fn deq(w: u32, d: vec2<f16>, c: vec2<f16>) -> vec2<u32> {
  let a = fma(h2((w & 0x000F000Fu) | 0x64006400u) - vec2<f16>(1032.0), d, c);
  let b = fma(h2(((w >> 8u) & 0x000F000Fu) | 0x64006400u) - vec2<f16>(1032.0), d, c);
  return vec2<u32>(w2(a), w2(b));
}

// Unit i of lane e at step t (u = e + 32 i: row n0 + u / 2, pair u % 2 of the step's two), a step ahead.
fn fetch_units(n0: u32, t: u32, e: u32) {
  for (var i = 0u; i < TN; i++) {
    let u = e + 32u * i;
    let p = 2u * (t % 2u) + u % 2u;
    let base = (n0 + u / 2u) * RV + (t / 2u) * 9u;
    ur[i] = U(W4[base], W4[base + 1u + 2u * p], W4[base + 2u + 2u * p]);
  }
}

// The units' weights as halves into the slot (row u / 2, k 64 (u % 2): low nibbles, then high), by put.
fn stage_units(slot: u32, t: u32, e: u32) {
  for (var i = 0u; i < TN; i++) {
    let u = e + 32u * i;
    let p = 2u * (t % 2u) + u % 2u;
    let q = ur[i];
    let s0 = scales(q.h, 2u * p);
    let s1 = scales(q.h, 2u * p + 1u);
    let d0 = vec2<f16>(s0.x); let c0 = vec2<f16>(s0.y);
    let d1 = vec2<f16>(s1.x); let c1 = vec2<f16>(s1.y);
    let o = slot + (u / 2u) * LDK + 64u * (u % 2u);
    let wv = array<u32, 8>(q.a.x, q.a.y, q.a.z, q.a.w, q.b.x, q.b.y, q.b.z, q.b.w);
    for (var j = 0u; j < 4u; j++) {
      let l0 = deq(wv[2u * j], d0, c0); let l1 = deq(wv[2u * j + 1u], d0, c0);
      let h0 = deq(wv[2u * j] >> 4u, d1, c1); let h1 = deq(wv[2u * j + 1u] >> 4u, d1, c1);
      put(o + 8u * j, vec4<u32>(l0, l1));
      put(o + 32u + 8u * j, vec4<u32>(h0, h1));
    }
  }
}"""
"""The Q4_K units both forms share: a lane's 64 weights of a step (two sub-blocks of one row), fetched into
registers and staged as halves through the form's ``put``; each form defines TN, RV, LDK and W4."""


SRC = """diagnostic(off, chromium.subgroup_matrix_uniformity);
enable f16;
enable chromium_experimental_subgroup_matrix;
{REQ}
@group(0) @binding(0) var<storage, read> XF: array<f16>;          // x [16][K], each 4 k as k0 k2 k1 k3
@group(0) @binding(3) var<storage, read> XV: array<vec4<u32>>;   // the same x as 16-byte words
@group(0) @binding(1) var<storage, read> W4: array<vec4<u32>>;    // Q4_K rows, 144-byte blocks
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;     // [16][N]

const N = {N}u;
const K = {K}u;
const TN = {TN}u;
const KS = {KS}u;
const R = 16u * TN;              // weight rows of a workgroup (each of its subgroups: the same rows, its own k)
const RV = K / 256u * 9u;        // vec4 per weight row
const NST = K / 128u;            // steps of 128 k (half a block: pairs 2 (t % 2) and 2 (t % 2) + 1)
const LDK = 136u;                // halves per staged row: 128 and 8 of padding
const SLOT = R * LDK;            // halves of a subgroup's slot
{WSDECL}
var<workgroup> cs: array<f32, KS * TN * 256u>;
const LDX = 136u;
{XDECL}

{UNITS}

fn put(o: u32, v: vec4<u32>) {{
{PUT}
}}


@compute @workgroup_size(32 * KS)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {{
  let n0 = wid.x * R;
  let sg = lid / 32u;
  let e = lid % 32u;
  let slot = sg * SLOT;
  var c0: subgroup_matrix_result<f32, 16, 16>;
  var c1: subgroup_matrix_result<f32, 16, 16>;
  var c2: subgroup_matrix_result<f32, 16, 16>;
  var c3: subgroup_matrix_result<f32, 16, 16>;
  fetch_units({FROW}, sg, e);
  let b00 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>>({WS}, slot, true, LDK);
  let a00 = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(&XF, sg * 16u, false, K);
  {XINIT}
  for (var it = 0u; it < NST / KS; it++) {{
    let t = sg + it * KS;
    {SYNC}
    {XPRE}
    {STAGE}
    {SYNC}
    if (t + KS < NST) {{ fetch_units({FROW}, t + KS, e); }}
{XSTAGE}
{MMAS}
  }}
  let cb = sg * TN * 256u;
  subgroupMatrixStore(&cs, cb, c0, false, 16u);
  if (TN >= 2u) {{ subgroupMatrixStore(&cs, cb + 256u, c1, false, 16u); }}
  if (TN >= 4u) {{
    subgroupMatrixStore(&cs, cb + 512u, c2, false, 16u);
    subgroupMatrixStore(&cs, cb + 768u, c3, false, 16u);
  }}
  workgroupBarrier();
  for (var q = lid; q < TN * 256u; q += 32u * KS) {{
    var v = 0.0;
    for (var s = 0u; s < KS; s++) {{ v += cs[s * TN * 256u + q]; }}
    let m = (q % 256u) / 16u;
    Y[m * N + n0 + 16u * (q / 256u) + q % 16u] = v;
  }}
}}
"""


XSTAGE = """    for (var i = 0u; i < 8u; i++) {{   // 16 rows x 128 k: 256 vec4, 8 a lane
      let w = e + 32u * i;
      (*bufferView<array<vec4<u32>, {n4}>>(&xsb, 0))[sg * 16u * LDX / 8u + (w / 16u) * (LDX / 8u) + w % 16u] =
          XV[((w / 16u) * K + t * 128u) / 8u + w % 16u];
    }}
    {sync}"""


def source(n: int, k: int, tn: int, ks: int, bv: bool, sync: bool, xmode: int, abl: str = "") -> str:
    """``abl`` (ablations, wrong results): ``nob`` the weight fragments loaded once, ``nost`` no dequantization
    (nor the loads it reads), ``fix`` every weight read from row 0's first block (cached)."""
    ws_halves = ks * 16 * tn * 136
    xdecl = f"var<workgroup> xsb: buffer<{2 * ks * 16 * 136}>;" if xmode == 1 else ""
    if bv or xmode == 1:
        view = f"bufferView<array<f16, {ws_halves}>>(&wsb, 0)"
        decl = f"var<workgroup> wsb: buffer<{2 * ws_halves}>;"
        put = f"  (*bufferView<array<vec4<u32>, {ws_halves // 8}>>(&wsb, 0))[o / 8u] = v;"
        req = "requires buffer_view;"
    else:
        view, decl, req = "&ws", f"var<workgroup> ws: array<f16, {ws_halves}>;", ""
        put = "\n".join(f"  let v{i} = h2(v[{i}]); ws[o + {2 * i}u] = v{i}.x; ws[o + {2 * i + 1}u] = v{i}.y;"
                        for i in range(4))
    xs = f"bufferView<array<f16, {ks * 16 * 136}>>(&xsb, 0)"
    xa = xmode in (3, 4)
    frag = "subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(&XF, {t} * 128u + {kk}u, false, K)"
    if xa:   # the 8 fragments of a step as named values (kk unrolled below)
        xpre = "\n    ".join(f"let a{i} = " + frag.format(t="t", kk=16 * i) + ";" for i in range(8))
    if xmode == 4:   # next step's fragments loaded while this step's run: carried in vars
        xpre = "\n    ".join(f"let a{i} = an{i};" for i in range(8)) + "\n    if (t + KS < NST) {\n      " + \
            "\n      ".join(f"an{i} = " + frag.format(t="(t + KS)", kk=16 * i) + ";" for i in range(8)) + "\n    }"
    aload = ["subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(&XF, t * 128u + kk, false, K)",
             f"subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>({xs}, sg * 16u * LDX + kk, false, LDX)",
             "a00", "select_frag", "select_frag"][xmode]
    sy = "workgroupBarrier();" if sync else ""
    bl = "subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>>(" + view + ", slot + {o}u * LDK + {kk}u, true, LDK)"
    mm = []
    for i in range(8):
        kk = 16 * i
        mm.append("    {")
        if xa:
            mm.append(f"      let a = a{i};")
        else:
            mm.append("      let a = " + aload.replace("kk", f"{kk}u") + ";")
        for j in range(tn):
            b = "b00" if abl == "nob" else bl.format(o=16 * j, kk=kk)
            mm.append(f"      c{j} = subgroupMatrixMultiplyAccumulate(a, {b}, c{j});")
        mm.append("    }")
    return SRC.format(UNITS=UNITS, N=n, K=k, TN=tn, KS=ks, WSDECL=decl, PUT=put, REQ=req, WS=view, XDECL=xdecl,
                      XSTAGE=XSTAGE.format(n4=ks * 16 * 136 // 8, sync=sy) if xmode == 1 else "",
                      MMAS="\n".join(mm),
                      XPRE=xpre if xa else "",
                      XINIT="\n  ".join(f"var an{i} = " + frag.format(t="sg", kk=16 * i) + ";" for i in range(8))
                      if xmode == 4 else "",
                      BLOAD="let b0 = b00;" if abl == "nob" else
                      f"let b0 = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>>({view}, slot + kk, true, LDK);",
                      STAGE="" if abl == "nost" else "stage_units(slot, t, e);",
                      FROW="0u" if abl == "fix" else "n0",
                      SYNC=sy)


SRC_WX = """diagnostic(off, chromium.subgroup_matrix_uniformity);
enable f16;
enable chromium_experimental_subgroup_matrix;
requires buffer_view;
// Workgroup-shared x: S subgroups on S x 16 TN weight rows, all at the same 128-k step; x's 16 x 128 of the
// step staged once per workgroup (double-buffered: one barrier a step), each subgroup's weights in its own
// slot. Split-k over workgroup z (partials [z][16][N], summed after).
@group(0) @binding(0) var<storage, read> XV: array<vec4<u32>>;    // x [16][K] f16, each 4 k as k0 k2 k1 k3
@group(0) @binding(1) var<storage, read> W4: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;     // [SPLITS][16][N]

const N = {N}u;
const K = {K}u;
const TN = {TN}u;
const S = {S}u;
const SPLITS = {SPLITS}u;
const R = 16u * TN;
const RV = K / 256u * 9u;
const NST = K / 128u;
const SPT = NST / SPLITS;        // steps per split
const LDK = 136u;
const SLOT = R * LDK;
const WSH = S * SLOT;            // halves of the weight slots
const XSH = 16u * LDK;           // halves of one x buffer
var<workgroup> sm: buffer<{SMB}>;   // weight slots, then two x buffers

var<private> xr: array<vec4<u32>, {XPL}>;
{UNITS}
fn put(o: u32, v: vec4<u32>) {{ (*bufferView<array<vec4<u32>, {SMB16}>>(&sm, 0))[o / 8u] = v; }}

fn fetch(n0: u32, t: u32, e: u32, lid: u32) {{
  fetch_units(n0, t, e);
  for (var i = 0u; i < {XPL}u; i++) {{   // x: 16 rows x 16 vec4
    let w = lid + 32u * S * i;
    if (w < 256u) {{ xr[i] = XV[((w / 16u) * K + t * 128u) / 8u + w % 16u]; }}
  }}
}}

fn stage(slot: u32, t: u32, e: u32, lid: u32) {{
  stage_units(slot, t, e);
  let xo = WSH + (t % 2u) * XSH;
  for (var i = 0u; i < {XPL}u; i++) {{
    let w = lid + 32u * S * i;
    if (w < 256u) {{ put(xo + (w / 16u) * LDK + 8u * (w % 16u), xr[i]); }}
  }}
}}

@compute @workgroup_size(32 * S)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {{
  let sg = lid / 32u;
  let e = lid % 32u;
  let n0 = wid.x * R * S + sg * R;
  let slot = sg * SLOT;
  var c0: subgroup_matrix_result<f32, 16, 16>;
  var c1: subgroup_matrix_result<f32, 16, 16>;
  var c2: subgroup_matrix_result<f32, 16, 16>;
  var c3: subgroup_matrix_result<f32, 16, 16>;
  let t0 = wid.z * SPT;
  fetch(n0, t0, e, lid);
  for (var t = t0; t < t0 + SPT; t++) {{
    stage(slot, t, e, lid);
    workgroupBarrier();
    if (t + 1u < t0 + SPT) {{ fetch(n0, t + 1u, e, lid); }}
    let xo = WSH + (t % 2u) * XSH;
{MMAS}
  }}
  let y0 = wid.z * 16u * N + n0;
  subgroupMatrixStore(&Y, y0, c0, false, N);
  if (TN >= 2u) {{ subgroupMatrixStore(&Y, y0 + 16u, c1, false, N); }}
  if (TN >= 4u) {{ subgroupMatrixStore(&Y, y0 + 32u, c2, false, N); subgroupMatrixStore(&Y, y0 + 48u, c3, false, N); }}
}}
"""


def source_wx(n: int, k: int, tn: int, s: int, splits: int, abl: str = "", ldk: int = 136) -> str:
    """``abl`` (ablations, wrong results, for where the time goes): ``nomma`` no products, ``noa`` x's fragment
    loaded once a step, ``nobar`` no barrier, ``xg`` (exact) x's fragments from storage, no x staging nor
    barrier, ``nodeq`` the loaded words staged as they are, ``nostw`` the
    weights loaded but never staged, ``fix`` every workgroup reads the first workgroup's rows (cached).
    ``ldk``: halves per staged row (a multiple of 8, >= 128)."""
    smh = s * 16 * tn * ldk + (0 if "xg" in abl else 2 * 16 * ldk)
    view = f"bufferView<array<f16, {smh}>>(&sm, 0)"
    mm = []
    for i in range(8):
        if "nomma" in abl:
            continue
        xa = "xo" if "noa" in abl else f"xo + {16 * i}u"
        mm.append(f"    {{\n      let a = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>({view}, "
                  f"{xa}, false, LDK);")
        for j in range(tn):
            mm.append(f"      c{j} = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<subgroup_matrix_right<f16, "
                      f"16, 16>>({view}, slot + {16 * j}u * LDK + {16 * i}u, true, LDK), c{j});")
        mm.append("    }")
    units = UNITS
    if "nodeq" in abl:
        units = units.replace("let l0 = deq(wv[2u * j], d0, c0); let l1 = deq(wv[2u * j + 1u], d0, c0);",
                              "let l0 = vec2<u32>(wv[2u * j], q.h.y); let l1 = vec2<u32>(wv[2u * j + 1u], q.h.z);")
        units = units.replace("let h0 = deq(wv[2u * j] >> 4u, d1, c1); let h1 = deq(wv[2u * j + 1u] >> 4u, d1, c1);",
                              "let h0 = vec2<u32>(wv[2u * j] >> 4u, q.h.x); let h1 = vec2<u32>(q.h.w, q.h.x);")
    if "nostw" in abl:
        units = units.replace("put(o + 8u * j, vec4<u32>(l0, l1));", "sink ^= l0.x ^ l1.y;")
        units = units.replace("put(o + 32u + 8u * j, vec4<u32>(h0, h1));", "sink ^= h0.y ^ h1.x;")
    src = SRC_WX.format(UNITS=units, N=n, K=k, TN=tn, S=s, SPLITS=splits, SMB=2 * smh, SMB16=smh // 8,
                        XPL=-(-256 // (32 * s)), MMAS="\n".join(mm))
    src = src.replace("const LDK = 136u;", f"const LDK = {ldk}u;\nvar<private> sink: u32;")
    src = src.replace("  let y0 = wid.z", "  if (sink == 0x12345u) { Y[0] = 1.0; }\n  let y0 = wid.z")
    if "xg" in abl:     # x's fragments straight from storage (every subgroup the same: L1), no x staging
        src = src.replace("var<storage, read> XV: array<vec4<u32>>;", "var<storage, read> XF: array<f16>;")
        src = src.replace("    if (w < 256u) {{ xr[i] = XV[".replace("{{", "{"), "    if (false) { xr[i] = XV[")
        src = src.replace("    if (w < 256u) { put(xo", "    if (false) { put(xo")
        src = src.replace("xr[i] = XV[((w / 16u) * K + t * 128u) / 8u + w % 16u];", "")
        src = src.replace("    workgroupBarrier();\n    if (t + 1u", "    if (t + 1u")
        a0 = f"subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>({view}, xo + "
        assert a0 in src
        src = src.replace(a0, "subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(&XF, t * 128u + ")
        src = src.replace(", false, LDK);\n      c0", ", false, K);\n      c0")
    if "nobar" in abl:
        src = src.replace("    workgroupBarrier();\n    if (t + 1u", "    if (t + 1u")
    if "fix" in abl:
        src = src.replace("  let n0 = wid.x * R * S + sg * R;",
                          "  let n0 = sg * R;\n  let nw = wid.x * R * S + sg * R;")
        src = src.replace("  let y0 = wid.z * 16u * N + n0;", "  let y0 = wid.z * 16u * N + nw;")
    return src


def permute_x(x16: np.ndarray) -> np.ndarray:
    """x's k in groups of 4 as k0 k2 k1 k3 (the kernel's staged weight order)."""
    m, k = x16.shape
    return x16.reshape(m, k // 4, 4)[:, :, [0, 2, 1, 3]].reshape(m, k)


def parse(v: str) -> tuple[int, int, bool, bool, int, str]:
    g = re.fullmatch(r"tn(\d)ks(\d)(bv)?(ns)?(xs|nox|xa|xn)?(nob|nost|fix)?", v)
    if not g:
        raise SystemExit(f"bad variant {v}")
    return int(g[1]), int(g[2]), bool(g[3]), not g[4], {None: 0, "xs": 1, "nox": 2, "xa": 3, "xn": 4}[g[5]], g[6] or ""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="glu,o,down")
    ap.add_argument("--variants", default="tn1ks4,tn2ks4,tn2ks2,tn4ks2,tn1ks4bv,tn2ks4bv,tn4ks2bv,tn2ks4bvns,tn2ks8bv")
    ap.add_argument("--reps", type=int, default=50)
    a = ap.parse_args()
    wgpu, _ = instance()
    dev = mma_device(wgpu)
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    rng = np.random.default_rng(0)
    for shape in a.shapes.split(","):
        n, k = SHAPES[shape]
        w = quantize(rng.standard_normal((n, k)).astype(np.float32) * 0.05, get_type("Q4_K")).reshape(n, -1)
        x = rng.standard_normal((16, k)).astype(np.float16)
        ref = x.astype(np.float64) @ half_dequant(w, "Q4_K").T
        bx = dev.create_buffer_with_data(data=permute_x(x).tobytes(), usage=usage)
        bw = dev.create_buffer_with_data(data=np.ascontiguousarray(w).tobytes(), usage=usage)
        by = dev.create_buffer(size=16 * n * 4, usage=usage)
        gb = (n * k * 144 // 256) / 1e9
        for v in a.variants.split(","):
            g = re.fullmatch(r"wx(\d)s(\d)k(\d+)(ld\d+)?((?:-[a-z]+)*)", v)
            if g:   # workgroup-shared x: tn, subgroups, splits (partial sums [splits][16][n], added here)
                tn, sgs, splits = int(g[1]), int(g[2]), int(g[3])
                if n % (16 * tn * sgs) or (k // 128) % splits:
                    continue
                src = source_wx(n, k, tn, sgs, splits, g[5], int(g[4][2:]) if g[4] else 136)
                exact = g[5] in ("", "-xg")
                bufs = (bx, bw, dev.create_buffer(size=splits * 16 * n * 4, usage=usage))
                groups = (n // (16 * tn * sgs), 1, splits)
            else:
                tn, ks, bv, sync, xmode, abl = parse(v)
                if n % (16 * tn) or (k // 128) % ks:
                    continue
                src, exact = source(n, k, tn, ks, bv, sync, xmode, abl), xmode != 2 and not abl
                bufs, groups = (bx, bw, by, bx) if xmode == 1 else (bx, bw, by), (n // (16 * tn), 1, 1)
            pipe = pipeline(dev, src, v)
            if pipe is None:
                continue
            bg = dev.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=[
                {"binding": i, "resource": {"buffer": b}} for i, b in enumerate(bufs)])
            run_once(dev, pipe, bg, groups)
            y = np.frombuffer(dev.queue.read_buffer(bufs[2]), np.float32).reshape(-1, 16, n).sum(0)
            err = float(np.abs(y - ref).max() / np.abs(ref).max())
            t = gpu_time(wgpu, dev, pipe, bg, groups, reps=a.reps)
            print(f"{shape:6} {n:6}x{k:<6} {v:12} {t * 1e6:8.1f} us {gb / t:7.0f} GB/s  err {err:.1e}"
                  + ("  WRONG" if not err < 2e-3 and exact else ""), flush=True)

if __name__ == "__main__":
    main()
