// gemm_mma.wgsl's weight units for Q6_K dequantized in half precision (TileConfig.half): each 32-block's
// 6-bit values become halves by their bits (0x6400 | q is 1024 + q, exact; minus 1056: q - 32, exact),
// then one f16 multiply each by the 16 elements' scale rounded to f16 (vec2: two weights an instruction),
// without the q32 loader's int -> f32 -> f16 conversions per weight. The 32 bytes of low bits and of high
// bits are each read as three 16-byte words (W4: W bound again, ops/gemm.py W16_BINDING) and selected into
// place (a block's body is 4-aligned, not 16), where 32-bit reads took ten, each touching 32 rows. The
// numpy twin: ops/gemm.py half_dequant.
#include "quant/q6_k.wgsl"

@group(0) @binding(12) var<storage, read> W4: array<vec4<u32>>;

const WU: u32 = 32u;     // halves per weight unit: one 32-block
// A unit as read: the three 16-byte words around its 32 bytes of low bits (l) and of high bits (h), the
// words holding its scales and d, and where in them (m: the low and high bits' byte offsets mod 16, t,
// whether the scales and d sit in the words' upper halves). fetch only reads (the loads land while the
// matrix units work on the staged step); w_put, a step later, decodes.
struct QR { l0: vec4<u32>, l1: vec4<u32>, l2: vec4<u32>, h0: vec4<u32>, h1: vec4<u32>, h2: vec4<u32>,
            sd: vec2<u32>, m: u32 }
alias WBlock = QR;

// Words s..s + 3 of the eight words a, b (s in 0..3).
fn wsel(a: vec4<u32>, b: vec4<u32>, s: u32) -> vec4<u32> {
  var r = a;
  if (s == 1u) { r = vec4<u32>(a.yzw, b.x); }
  if (s == 2u) { r = vec4<u32>(a.zw, b.xy); }
  if (s == 3u) { r = vec4<u32>(a.w, b.xyz); }
  return r;
}

// The 32 bytes at byte c (4-aligned, mod 16: a block's body is, backends/wgpu/layout.py) of the three
// 16-byte words v0 v1 v2 read around them: bytes c.. in [0], c + 16.. in [1].
fn w32(v0: vec4<u32>, v1: vec4<u32>, v2: vec4<u32>, c: u32) -> array<vec4<u32>, 2> {
  let s = c >> 2u;
  return array<vec4<u32>, 2>(wsel(v0, v1, s), wsel(v1, v2, s));
}

// 32-block j of weight row n; zero past the rows or past k.
fn w_load(n: u32, j: u32) -> QR {
  if (n < D.rows && j < D.k / 32u) { return w_fast(n, j); }
  let z = vec4<u32>(0u);
  return QR(z, z, z, z, z, z, vec2<u32>(0u), 0u);
}

// w_load inside W (fetch's tiles wholly inside it): unchecked. Sub-block j % 8 as quant/q6_k.wgsl's
// q6_sub places it (the window stays inside the block: ql and qh end at least 18 bytes before it does).
fn w_fast(n: u32, j: u32) -> QR {
  let blk0 = w_base + n * D.row_bytes + (j / 8u) * QB;
  let blk = pair_body(blk0);
  let h = (j % 8u) >> 2u;
  let t = j & 3u;
  let ql = blk + 64u * h + 32u * (t & 1u);
  let qh = blk + 128u + 32u * h;
  let sc = blk + 192u + 8u * h + 2u * t;
  let ql4 = ql >> 4u;
  let qh4 = qh >> 4u;
  return QR(W4[ql4], W4[ql4 + 1u], W4[ql4 + 2u], W4[qh4], W4[qh4 + 1u], W4[qh4 + 2u],
            vec2<u32>(W[sc >> 2u], W[pair_dword(blk0, QB)]),
            (ql & 15u) | ((qh & 15u) << 4u) | (t << 8u) | ((sc & 2u) << 9u) | ((blk0 & 2u) << 10u));
}

// The 4 weights of value word w (one 6-bit value a byte) at ws[o], ws[o + WST] .., times s.
fn put4(o: u32, w: u32, s: vec2<f16>) {
  let a = (h2((w & 0x00FF00FFu) | 0x64006400u) - vec2<f16>(1056.0)) * s;
  let b = (h2(((w >> 8u) & 0x00FF00FFu) | 0x64006400u) - vec2<f16>(1056.0)) * s;
  ws[o] = a.x; ws[o + WST] = b.x; ws[o + 2u * WST] = a.y; ws[o + 3u * WST] = b.y;
}

fn w_put(o: u32, q: QR) {
  let t = (q.m >> 8u) & 3u;
  let sc = bitcast<i32>(q.sd.x >> (16u * ((q.m >> 10u) & 1u)));          // two int8 scales, 16 elements each
  let d = unpack2x16float(q.sd.y >> (16u * ((q.m >> 11u) & 1u))).x;
  let s = vec2<f16>(d * vec2<f32>(f32((sc << 24u) >> 24u), f32((sc << 16u) >> 24u)));   // exact, rounded once
  let l = w32(q.l0, q.l1, q.l2, q.m & 15u);
  let h = w32(q.h0, q.h1, q.h2, (q.m >> 4u) & 15u);
  let lo = vec2<f16>(s.x);
  let hi = vec2<f16>(s.y);
  for (var i = 0u; i < 4u; i++) {
    put4(o + 4u * i * WST, q6_bytes(l[0], h[0], t)[i], lo);
    put4(o + (16u + 4u * i) * WST, q6_bytes(l[1], h[1], t)[i], hi);
  }
}
