// gemm_mma.wgsl's weight units for Q4_K dequantized in half precision (TileConfig.half): each 32-block's
// nibbles become halves by their bits (0x6400 | q is 1024 + q; minus 1032: q - 8, exact), then one f16
// multiply-add each, (q - 8) d sc + (8 d sc - dmin m), with both factors rounded to f16 (vec2: two weights
// an instruction). Centred, the products stay under 8 d sc, so f16 loses less to the min's cancellation.
// The q32 loader's int -> f32 -> f16 conversions per weight run at a fraction of the FMA rate; this has
// none per weight. The numpy twin: ops/gemm.py half_dequant.
#include "quant/q4_k.wgsl"

const WU: u32 = 32u;     // halves per weight unit: one 32-block
struct QH { lo: vec4<u32>, hi: vec4<u32>, s: vec2<f16> }   // nibble words (shifted), f16 of d sc, 8 d sc - dmin m
alias WBlock = QH;

fn qh(blk: u32, j: u32) -> QH {
  let dm = unpack2x16float(W[blk >> 2u]);
  let f = dm * scale_min_k4(blk + 4u, j);      // f32 products of f16 and 6-bit ints: exact
  let s = vec2<f16>(f16(f.x), f16(8.0 * f.x - f.y));
  let w = (blk + 16u + 32u * (j >> 1u)) >> 2u;
  let sh = vec4<u32>(4u * (j & 1u));
  return QH(vec4<u32>(W[w], W[w + 1u], W[w + 2u], W[w + 3u]) >> sh,
            vec4<u32>(W[w + 4u], W[w + 5u], W[w + 6u], W[w + 7u]) >> sh, s);
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

// The 4 weights of nibble word w (low nibble of each byte) at ws[o..o + 4].
fn put4(o: u32, w: u32, d: vec2<f16>, c: vec2<f16>) {
  let a = fma(bitcast<vec2<f16>>((w & 0x000F000Fu) | 0x64006400u) - vec2<f16>(1032.0), d, c);
  let b = fma(bitcast<vec2<f16>>(((w >> 8u) & 0x000F000Fu) | 0x64006400u) - vec2<f16>(1032.0), d, c);
  ws[o] = a.x; ws[o + 1u] = b.x; ws[o + 2u] = a.y; ws[o + 3u] = b.y;
}

fn w_put(o: u32, q: QH) {
  let d = vec2<f16>(q.s.x);
  let c = vec2<f16>(q.s.y);
  for (var i = 0u; i < 4u; i++) {
    put4(o + 4u * i, q.lo[i], d, c);
    put4(o + 16u + 4u * i, q.hi[i], d, c);
  }
}
