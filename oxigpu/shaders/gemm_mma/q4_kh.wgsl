// gemm_mma.wgsl's weight units for Q4_K dequantized in half precision (TileConfig.half): each 32-block's
// nibbles become halves by their bits (0x6400 | q is 1024 + q; minus 1032: q - 8, exact), then one f16
// multiply-add each, (q - 8) d sc + (8 d sc - dmin m), with both factors rounded to f16 (vec2: two weights
// an instruction). Centred, the products stay under 8 d sc, so f16 loses less to the min's cancellation.
// The q32 loader's int -> f32 -> f16 conversions per weight run at a fraction of the FMA rate; this has
// none per weight. Q4_K blocks (144 bytes) and rows are 16-byte multiples, so a unit is read as three
// 16-byte words through W4 (W bound again: ops/gemm.py W16_BINDING): the block's head (d, dmin, scales)
// and the 32 bytes of its nibbles, where 32-bit reads took 12 load instructions, each touching 32 rows.
// The numpy twin: ops/gemm.py half_dequant.
#include "quant/q4_k.wgsl"

@group(0) @binding(12) var<storage, read> W4: array<vec4<u32>>;

const WU: u32 = 32u;     // halves per weight unit: one 32-block
// A unit as read: the block's head, the 32 bytes of its nibbles, its 32-block j. fetch only reads (the
// loads land while the matrix units work on the staged step); w_put, a step later, decodes.
struct QR { h: vec4<u32>, a: vec4<u32>, b: vec4<u32>, j: u32 }
alias WBlock = QR;

// Byte b of the scales (words 1..3 of the block's head h).
fn sbyte(h: vec4<u32>, b: u32) -> u32 {
  return (h[1u + (b >> 2u)] >> (8u * (b & 3u))) & 0xFFu;
}

// f16 of d sc and 8 d sc - dmin m of 32-block j (get_scale_min_k4).
fn scales(h: vec4<u32>, j: u32) -> vec2<f16> {
  var sm = vec2<u32>(sbyte(h, j) & 63u, sbyte(h, j + 4u) & 63u);
  if (j >= 4u) {
    let hi = sbyte(h, j + 4u);
    sm = vec2<u32>((hi & 0xFu) | ((sbyte(h, j - 4u) >> 6u) << 4u), (hi >> 4u) | ((sbyte(h, j) >> 6u) << 4u));
  }
  let f = unpack2x16float(h.x) * vec2<f32>(sm);      // f32 products of f16 and 6-bit ints: exact
  return vec2<f16>(f16(f.x), f16(8.0 * f.x - f.y));
}

// 32-block j of weight row n; zero past the rows or past k.
fn w_load(n: u32, j: u32) -> QR {
  if (n < D.rows && j < D.k / 32u) { return w_fast(n, j); }
  return QR(vec4<u32>(0u), vec4<u32>(0u), vec4<u32>(0u), 0u);
}

// w_load inside W (fetch's tiles wholly inside it): unchecked.
fn w_fast(n: u32, j: u32) -> QR {
  let blk = w_base + n * D.row_bytes + (j / 8u) * QB;
  let jj = j % 8u;
  let w = (blk + 16u + 32u * (jj >> 1u)) >> 4u;
  return QR(W4[blk >> 4u], W4[w], W4[w + 1u], jj);
}

// The 4 weights of nibble word w (low nibble of each byte) at ws[o], ws[o + WST] .. (WST: gemm_mma.wgsl's
// distance of a row's consecutive k in ws).
fn put4(o: u32, w: u32, d: vec2<f16>, c: vec2<f16>) {
  let a = fma(h2((w & 0x000F000Fu) | 0x64006400u) - vec2<f16>(1032.0), d, c);
  let b = fma(h2(((w >> 8u) & 0x000F000Fu) | 0x64006400u) - vec2<f16>(1032.0), d, c);
  ws[o] = a.x; ws[o + WST] = b.x; ws[o + 2u * WST] = a.y; ws[o + 3u * WST] = b.y;
}

fn w_put(o: u32, q: QR) {
  let s = scales(q.h, q.j);
  let d = vec2<f16>(s.x);
  let c = vec2<f16>(s.y);
  let sh = vec4<u32>(4u * (q.j & 1u));
  let lo = q.a >> sh;
  let hi = q.b >> sh;
  for (var i = 0u; i < 4u; i++) {
    put4(o + 4u * i * WST, lo[i], d, c);
    put4(o + (16u + 4u * i) * WST, hi[i], d, c);
  }
}
