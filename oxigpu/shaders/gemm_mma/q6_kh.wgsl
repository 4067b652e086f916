// gemm_mma.wgsl's weight units for Q6_K dequantized in half precision (TileConfig.half): each 32-block's
// 6-bit values become halves by their bits (0x6400 | q is 1024 + q, exact; minus 1056: q - 32, exact),
// then one f16 multiply each by the 16 elements' scale rounded to f16 (vec2: two weights an instruction),
// without the q32 loader's int -> f32 -> f16 conversions per weight. The 32 bytes of low bits and of high
// bits are each read as three 16-byte words (W4: W bound again, ops/gemm.py W16_BINDING) and shifted into
// place (Q6_K blocks are 2-byte aligned), where 32-bit reads took ten, each touching 32 rows. The numpy
// twin: ops/gemm.py half_dequant.
#include "quant/q6_k.wgsl"

@group(0) @binding(12) var<storage, read> W4: array<vec4<u32>>;

const WU: u32 = 32u;     // halves per weight unit: one 32-block
struct QH { lo: vec4<u32>, hi: vec4<u32>, s: vec2<f16> }   // 6-bit value bytes, f16(d sc) of each 16
alias WBlock = QH;

// Words s..s + 3 of the eight words a, b (s in 0..4).
fn wsel(a: vec4<u32>, b: vec4<u32>, s: u32) -> vec4<u32> {
  var r = a;
  if (s == 1u) { r = vec4<u32>(a.yzw, b.x); }
  if (s == 2u) { r = vec4<u32>(a.zw, b.xy); }
  if (s == 3u) { r = vec4<u32>(a.w, b.xyz); }
  if (s == 4u) { r = b; }
  return r;
}

// The 32 bytes at the 2-aligned byte b of W (blocks of 210 bytes: neighbouring blocks and rows differ in
// alignment) from the three 16-byte words around them: bytes b.. in [0], b + 16.. in [1]. The window stays
// inside the block (ql and qh end at least 18 bytes before it does).
fn lw32(b: u32) -> array<vec4<u32>, 2> {
  let q = b >> 4u;
  let v0 = W4[q];
  let v1 = W4[q + 1u];
  let v2 = W4[q + 2u];
  let s = (b >> 2u) & 3u;
  let lo = wsel(v0, v1, s);
  let hi = wsel(v1, v2, s);
  if ((b & 2u) == 0u) { return array<vec4<u32>, 2>(lo, hi); }
  let sh = vec4<u32>(16u);
  return array<vec4<u32>, 2>((lo >> sh) | (wsel(v0, v1, s + 1u) << sh), (hi >> sh) | (wsel(v1, v2, s + 1u) << sh));
}

// Sub-block j (quant/q6_k.wgsl's q6_sub, as gemm_q8/q6_k.wgsl).
fn qh(blk: u32, j: u32) -> QH {
  let b = q6_sub(blk, j);
  let s = vec2<f16>(f16at(blk + 208u) * b.sc);   // exact, rounded once
  let l = lw32(b.ql);
  let h = lw32(b.qh);
  return QH(q6_bytes(l[0], h[0], b.t), q6_bytes(l[1], h[1], b.t), s);
}

// 32-block j of weight row n; zero past the rows or past k.
fn w_load(n: u32, j: u32) -> QH {
  if (n < D.rows && j < D.k / 32u) { return w_fast(n, j); }
  return QH(vec4<u32>(0u), vec4<u32>(0u), vec2<f16>(0.0));
}

// w_load inside W (fetch's tiles wholly inside it): unchecked.
fn w_fast(n: u32, j: u32) -> QH {
  return qh(w_base + n * D.row_bytes + (j / 8u) * QB, j % 8u);
}

// The 4 weights of value word w (one 6-bit value a byte) at ws[o], ws[o + WST] .., times s.
fn put4(o: u32, w: u32, s: vec2<f16>) {
  let a = (h2((w & 0x00FF00FFu) | 0x64006400u) - vec2<f16>(1056.0)) * s;
  let b = (h2(((w >> 8u) & 0x00FF00FFu) | 0x64006400u) - vec2<f16>(1056.0)) * s;
  ws[o] = a.x; ws[o + WST] = b.x; ws[o + 2u * WST] = a.y; ws[o + 3u * WST] = b.y;
}

fn w_put(o: u32, q: QH) {
  let lo = vec2<f16>(q.s.x);
  let hi = vec2<f16>(q.s.y);
  for (var i = 0u; i < 4u; i++) {
    put4(o + 4u * i * WST, q.lo[i], lo);
    put4(o + (16u + 4u * i) * WST, q.hi[i], hi);
  }
}
