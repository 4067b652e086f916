// EXPERIMENT copy of gemm_tiled.wgsl as it was before loader threads (the 256 FMA threads load the next
// step into registers), for scripts/bench_gemm.py --exp (timing only). EXP bits switch parts off or on:
// 1 no weight loads after the first step, 2 no x loads, 4 no smem stores (the loads then go dead too),
// 8 no FMA loop, 16 no swizzle, 32 raw weight words loaded before the FMAs and decoded after (F16, Q4_K;
// RAWQ names which), 64 3-D workgroup arrays ([buf][k][slot]: constant k offsets), 128 explicit fma().
// H100, 8x8/16, Llama-3.1-8B gate/up (Q4_K): all on 16.0 TFLOP/s, 4 (FMA loop and barriers only) 29.4,
// 8 (everything but the FMAs) 40.1, 16/32/64/128 no change: the loop ran at ~44 % of the FMA peak and the
// load/dequantize/store work added to it instead of overlapping, which loader threads fixed.
#include "common/matmul_io.wgsl"
#include "quant/{{QUANT}}.wgsl"
// WT_ENABLE: "enable f16;" when WT is f16 (hoisted by the preprocessor), else empty
{{WT_ENABLE}}

alias WT = {{WT}};

const TM: u32 = {{TM}}u;
const TN: u32 = {{TN}}u;
const BM: u32 = 16u * TM;
const BN: u32 = 16u * TN;
const BK: u32 = {{BK}}u;
const SPLITS: u32 = {{SPLITS}}u;
const EXP: u32 = {{EXP}}u;
const RAWQ: u32 = {{RAWQ}}u;   // 1 F16, 2 Q4_K
const CPB: u32 = QK / 8u;
const LW: u32 = BK / 8u;          // threads per weight row of a tile (one 8-element chunk each)
const LX: u32 = BK / 4u;          // threads per x row (one vec4 each)
const NWC: u32 = BN * LW;         // weight chunks per tile (<= 256)
const NXC: u32 = BM * LX;         // x vec4s per tile (<= 512)
const XS: u32 = BK * BM / 4u;     // vec4 slots of one x buffer: [k][m / 4]
const WS: u32 = BK * BN / 4u;     // vec4 slots of one weight buffer: [k][n / 4]

const A3: bool = (EXP & 64u) != 0u;
var<workgroup> xs: array<vec4<f32>, select(2u * XS, 1u, A3)>;
var<workgroup> ws: array<vec4<WT>, select(2u * WS, 1u, A3)>;
var<workgroup> xs3: array<array<array<vec4<f32>, select(1u, BM / 4u, A3)>, select(1u, BK, A3)>, select(1u, 2u, A3)>;
var<workgroup> ws3: array<array<array<vec4<WT>, select(1u, BN / 4u, A3)>, select(1u, BK, A3)>, select(1u, 2u, A3)>;

struct Raw { a: vec4<u32>, b: vec2<u32> }

fn raw_w(n0: u32, k0: u32, c: u32) -> Raw {
  let n = n0 + c / LW;
  let wc = k0 / 8u + c % LW;
  if (n < D.rows && wc < D.k / 8u) {
    let blk = n * D.row_bytes + (wc / CPB) * QB;
    let cc = wc % CPB;
    if (RAWQ == 1u) {
      let w = blk >> 2u;
      return Raw(vec4<u32>(W[w], W[w + 1u], W[w + 2u], W[w + 3u]), vec2<u32>(0u));
    }
    // Q4_K: d/dmin word, 3 scale words, 2 qs words of chunk cc
    let s = cc >> 2u;
    let q = (blk + 16u + 32u * (s >> 1u) + (cc & 3u) * 8u) >> 2u;
    let w = blk >> 2u;
    return Raw(vec4<u32>(W[w], W[w + 1u], W[w + 2u], W[w + 3u]), vec2<u32>(W[q], W[q + 1u]));
  }
  return Raw(vec4<u32>(0u), vec2<u32>(0u));
}

fn byte_of(r: Raw, i: u32) -> u32 {   // byte i (0..11) of the scales words r.a.yzw
  return (r.a[1u + i / 4u] >> ((i % 4u) * 8u)) & 0xFFu;
}

fn dec_w(r: Raw, c: u32, k0: u32) -> V8 {
  if (RAWQ == 1u) {
    return V8(vec4<f32>(unpack2x16float(r.a.x), unpack2x16float(r.a.y)),
              vec4<f32>(unpack2x16float(r.a.z), unpack2x16float(r.a.w)));
  }
  let cc = (k0 / 8u + c % LW) % CPB;
  let s = cc >> 2u;
  let dm = unpack2x16float(r.a.x);
  var sm: vec2<f32>;
  if (s < 4u) {
    sm = vec2<f32>(f32(byte_of(r, s) & 63u), f32(byte_of(r, s + 4u) & 63u));
  } else {
    let hi = byte_of(r, s + 4u);
    sm = vec2<f32>(f32((hi & 0xFu) | ((byte_of(r, s - 4u) >> 6u) << 4u)),
                   f32((hi >> 4u) | ((byte_of(r, s) >> 6u) << 4u)));
  }
  let n = nib8(r.b.x, r.b.y, (s & 1u) * 4u);
  let d = dm.x * sm.x;
  let m = dm.y * sm.y;
  return V8(d * vec4<f32>(n[0]) - m, d * vec4<f32>(n[1]) - m);
}

// Slot swizzles of k row kk (0 .. BK-1): a store instruction's lanes cover 32 / L rows of one chunk
// column, i.e. 8 / L slots, and the L chunk columns move to disjoint slot groups.
fn sw(kk: u32) -> u32 { if ((EXP & 16u) != 0u) { return 0u; } return (kk / 8u) * (8u / LW); }
fn sx(kk: u32) -> u32 { if ((EXP & 16u) != 0u) { return 0u; } return (kk / 4u) * (8u / LX); }

// Weight chunk c of the tile at (n0, k0): row n0 + c / LW, elements k0 + 8 (c % LW) ..; zero past the ends.
fn load_w(n0: u32, k0: u32, c: u32) -> V8 {
  let n = n0 + c / LW;
  let wc = k0 / 8u + c % LW;
  if (n < D.rows && wc < D.k / 8u) {
    return dq8(n * D.row_bytes + (wc / CPB) * QB, wc % CPB);
  }
  return V8(vec4<f32>(0.0), vec4<f32>(0.0));
}

fn put_w(buf: u32, c: u32, v: V8) {
  let n = c / LW;
  let kc = c % LW;
  let slot = (n / 4u) ^ sw(kc * 8u);
  let base = buf * WS + kc * 8u * (BN / 4u) + slot;
  let j = n % 4u;
  if ((EXP & 64u) != 0u) {
    for (var e = 0u; e < 4u; e++) {
      ws3[buf][kc * 8u + e][slot][j] = WT(v.a[e]);
      ws3[buf][kc * 8u + 4u + e][slot][j] = WT(v.b[e]);
    }
    return;
  }
  for (var e = 0u; e < 4u; e++) {
    ws[base + e * (BN / 4u)][j] = WT(v.a[e]);
    ws[base + (4u + e) * (BN / 4u)][j] = WT(v.b[e]);
  }
}

// x vec4 c of the tile at (m0, k0): row m0 + c / LX, elements k0 + 4 (c % LX) ..; zero past the ends.
fn load_x(m0: u32, k0: u32, c: u32) -> vec4<f32> {
  let m = m0 + c / LX;
  let k4 = k0 / 4u + c % LX;
  if (m < D.m && k4 < D.k / 4u) { return X[m * (D.k / 4u) + k4]; }
  return vec4<f32>(0.0);
}

fn put_x(buf: u32, c: u32, v: vec4<f32>) {
  let m = c / LX;
  let kq = c % LX;
  let slot = (m / 4u) ^ sx(kq * 4u);
  let base = buf * XS + kq * 4u * (BM / 4u) + slot;
  let j = m % 4u;
  if ((EXP & 64u) != 0u) {
    for (var e = 0u; e < 4u; e++) { xs3[buf][kq * 4u + e][slot][j] = v[e]; }
    return;
  }
  for (var e = 0u; e < 4u; e++) { xs[base + e * (BM / 4u)][j] = v[e]; }
}

// Column n (of this chunk's rows) of row m: through store(), or as split z's partial sum.
fn put_y(z: u32, m: u32, n: u32, v: f32) {
  if (SPLITS > 1u) {
    Y[(z * D.m + m) * D.rows + n] = v;
  } else {
    store(m, D.col0 + n, v);
  }
}

fn store_row(z: u32, m: u32, n: u32, v0: vec4<f32>, v1: vec4<f32>) {
  if (m >= D.m) { return; }
  for (var j = 0u; j < 4u; j++) {
    if (n + j < D.rows) { put_y(z, m, n + j, v0[j]); }
    if (TN == 8u && n + 64u + j < D.rows) { put_y(z, m, n + 64u + j, v1[j]); }
  }
}

fn k1n(kbeg: u32, t: u32) -> u32 { return kbeg + (t + 1u) * BK; }

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  let n0 = wid.x * BN;
  let m0 = wid.y * BM;
  let warp = lid / 32u;
  let lane = lid % 32u;
  let ty = (warp / 2u) * 4u + lane / 8u;
  let tx = (warp % 2u) * 8u + lane % 8u;
  // c<r>_<b>: row 4 ty + r (r < 4) or 64 + 4 ty + r - 4, columns 4 tx + 64 b ..; named, not an array, so
  // they stay in registers. With TM or TN 4 the second halves are dead code.
  var c0_0 = vec4<f32>(0.0); var c0_1 = vec4<f32>(0.0);
  var c1_0 = vec4<f32>(0.0); var c1_1 = vec4<f32>(0.0);
  var c2_0 = vec4<f32>(0.0); var c2_1 = vec4<f32>(0.0);
  var c3_0 = vec4<f32>(0.0); var c3_1 = vec4<f32>(0.0);
  var c4_0 = vec4<f32>(0.0); var c4_1 = vec4<f32>(0.0);
  var c5_0 = vec4<f32>(0.0); var c5_1 = vec4<f32>(0.0);
  var c6_0 = vec4<f32>(0.0); var c6_1 = vec4<f32>(0.0);
  var c7_0 = vec4<f32>(0.0); var c7_1 = vec4<f32>(0.0);

  var kbeg = 0u;
  var kend = D.k;
  if (SPLITS > 1u) {
    let kper = ((D.k + SPLITS - 1u) / SPLITS + BK - 1u) / BK * BK;
    kbeg = min(wid.z * kper, D.k);
    kend = min(kbeg + kper, D.k);
  }
  let steps = (kend - kbeg + BK - 1u) / BK;
  var pw = V8(vec4<f32>(0.0), vec4<f32>(0.0));
  var pr = Raw(vec4<u32>(0u), vec2<u32>(0u));
  var px0 = vec4<f32>(0.0);
  var px1 = vec4<f32>(0.0);
  if (lid < NWC) { put_w(0u, lid, load_w(n0, kbeg, lid)); }
  if (lid < NXC) { put_x(0u, lid, load_x(m0, kbeg, lid)); }
  if (lid + 256u < NXC) { put_x(0u, lid + 256u, load_x(m0, kbeg, lid + 256u)); }
  workgroupBarrier();
  for (var t = 0u; t < steps; t++) {
    let more = t + 1u < steps;
    if (more) {             // the next step's global loads, in flight during the FMAs
      let k1 = kbeg + (t + 1u) * BK;
      if ((EXP & 1u) == 0u) {
        if ((EXP & 32u) != 0u) {
          if (lid < NWC) { pr = raw_w(n0, k1, lid); }
        } else {
          if (lid < NWC) { pw = load_w(n0, k1, lid); }
        }
      }
      if ((EXP & 2u) == 0u) {
        if (lid < NXC) { px0 = load_x(m0, k1, lid); }
        if (lid + 256u < NXC) { px1 = load_x(m0, k1, lid + 256u); }
      }
    }
    let xb = (t % 2u) * XS;
    let wb = (t % 2u) * WS;
    let cur = t % 2u;
    for (var kk = 0u; kk < BK; kk++) {
      if ((EXP & 8u) != 0u) { break; }
      let xo = xb + kk * (BM / 4u) + (ty ^ sx(kk));
      let wo = wb + kk * (BN / 4u) + (tx ^ sw(kk));
      var x0 = xs[xo];
      var x1 = xs[select(xo, xo + 16u, TM == 8u)];
      var w0 = vec4<f32>(ws[wo]);
      var w1 = vec4<f32>(ws[select(wo, wo + 16u, TN == 8u)]);
      if ((EXP & 64u) != 0u) {
        let xq = ty ^ sx(kk);
        let wq = tx ^ sw(kk);
        x0 = xs3[cur][kk][xq];
        x1 = xs3[cur][kk][select(xq, xq + 16u, TM == 8u)];
        w0 = vec4<f32>(ws3[cur][kk][wq]);
        w1 = vec4<f32>(ws3[cur][kk][select(wq, wq + 16u, TN == 8u)]);
      }
      if ((EXP & 128u) != 0u) {
        c0_0 = fma(vec4<f32>(x0.x), w0, c0_0); c0_1 = fma(vec4<f32>(x0.x), w1, c0_1);
        c1_0 = fma(vec4<f32>(x0.y), w0, c1_0); c1_1 = fma(vec4<f32>(x0.y), w1, c1_1);
        c2_0 = fma(vec4<f32>(x0.z), w0, c2_0); c2_1 = fma(vec4<f32>(x0.z), w1, c2_1);
        c3_0 = fma(vec4<f32>(x0.w), w0, c3_0); c3_1 = fma(vec4<f32>(x0.w), w1, c3_1);
        c4_0 = fma(vec4<f32>(x1.x), w0, c4_0); c4_1 = fma(vec4<f32>(x1.x), w1, c4_1);
        c5_0 = fma(vec4<f32>(x1.y), w0, c5_0); c5_1 = fma(vec4<f32>(x1.y), w1, c5_1);
        c6_0 = fma(vec4<f32>(x1.z), w0, c6_0); c6_1 = fma(vec4<f32>(x1.z), w1, c6_1);
        c7_0 = fma(vec4<f32>(x1.w), w0, c7_0); c7_1 = fma(vec4<f32>(x1.w), w1, c7_1);
        continue;
      }
      c0_0 += x0.x * w0; c0_1 += x0.x * w1;
      c1_0 += x0.y * w0; c1_1 += x0.y * w1;
      c2_0 += x0.z * w0; c2_1 += x0.z * w1;
      c3_0 += x0.w * w0; c3_1 += x0.w * w1;
      c4_0 += x1.x * w0; c4_1 += x1.x * w1;
      c5_0 += x1.y * w0; c5_1 += x1.y * w1;
      c6_0 += x1.z * w0; c6_1 += x1.z * w1;
      c7_0 += x1.w * w0; c7_1 += x1.w * w1;
    }
    if (more) {             // buffer (t + 1) % 2 was last read in step t - 1, before the last barrier
      let nb = (t + 1u) % 2u;
      if ((EXP & 4u) == 0u) {
        if ((EXP & 32u) != 0u && (EXP & 1u) == 0u) {
          if (lid < NWC) { put_w(nb, lid, dec_w(pr, lid, k1n(kbeg, t))); }
        } else {
          if (lid < NWC) { put_w(nb, lid, pw); }
        }
        if (lid < NXC) { put_x(nb, lid, px0); }
        if (lid + 256u < NXC) { put_x(nb, lid + 256u, px1); }
      }
    }
    workgroupBarrier();
  }
  let m = m0 + 4u * ty;
  let n = n0 + 4u * tx;
  let z = wid.z;
  store_row(z, m, n, c0_0, c0_1);
  store_row(z, m + 1u, n, c1_0, c1_1);
  store_row(z, m + 2u, n, c2_0, c2_1);
  store_row(z, m + 3u, n, c3_0, c3_1);
  if (TM == 8u) {
    store_row(z, m + 64u, n, c4_0, c4_1);
    store_row(z, m + 65u, n, c5_0, c5_1);
    store_row(z, m + 66u, n, c6_0, c6_1);
    store_row(z, m + 67u, n, c7_0, c7_1);
  }
}
