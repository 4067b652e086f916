// gemm_mma.wgsl's weight units for the 32-element block types whose block is one unit (Q8_0, Q5_0, Q4_0):
// fetch only reads the QW words that hold the block (from its 2-aligned start's word), and w_put
// decodes them a step later, so the loads land while the matrix units work (q32.wgsl decodes as it
// reads, and the step waits for the loads). The decode, gemm_mma/q32r_<type>.wgsl's q32b, takes the
// block's words aligned to its first byte, at constant indices (they stay in registers).
#include "gemm_q8/q32.wgsl"
#include "gemm_q8/{{QUANT}}.wgsl"
#include "gemm_mma/q32r_{{QUANT}}.wgsl"

const WU: u32 = 32u;     // halves per weight unit: one 32-block
struct QR { w: array<u32, QW>, mis: u32 }   // words from the block's word on; mis: 16 if it starts 2 bytes in
alias WBlock = QR;

// 32-block j of weight row n; zero past the rows or past k.
fn w_load(n: u32, j: u32) -> QR {
  if (n < D.rows && j < D.k / 32u) { return w_fast(n, j); }
  return QR(array<u32, QW>(), 0u);
}

// w_load inside W (fetch's tiles wholly inside it): unchecked. QW words cover the block either way (its
// bytes plus the 2 before it fit them), so nothing past W is read.
fn w_fast(n: u32, j: u32) -> QR {
  let blk = w_base + n * D.row_bytes + j * QB;
  let w0 = blk >> 2u;
  var r: QR;
  for (var i = 0u; i < QW; i++) { r.w[i] = W[w0 + i]; }
  r.mis = (blk & 2u) * 8u;
  return r;
}

// The 4 int8 of word w (byte 0 first) times s, as halves at ws[o], ws[o + WST] ..: byte q ^ 0x80 = q + 128
// as the low bits of 1024 (0x6400) is 1152 + q, exact; minus 1152, q; times s (d: an f16 value) rounded
// once, as the f32 product rounded to f16 is (no int -> float -> half conversions per weight).
fn put4(o: u32, w: u32, s: vec2<f16>) {
  let u = w ^ 0x80808080u;
  let a = (h2((u & 0x00FF00FFu) | 0x64006400u) - vec2<f16>(1152.0)) * s;          // bytes 0 and 2
  let b = (h2(((u >> 8u) & 0x00FF00FFu) | 0x64006400u) - vec2<f16>(1152.0)) * s;  // bytes 1 and 3
  ws[o] = a.x; ws[o + WST] = b.x; ws[o + 2u * WST] = a.y; ws[o + 3u * WST] = b.y;
}

fn w_put(o: u32, r: QR) {
  var b: array<u32, QW>;
  for (var i = 0u; i < QW - 1u; i++) {
    b[i] = select(r.w[i], (r.w[i] >> 16u) | (r.w[i + 1u] << 16u), r.mis != 0u);
  }
  b[QW - 1u] = r.w[QW - 1u] >> r.mis;   // 2 bytes in: its upper half lies past the block (unused)
  let q = q32b(b);
  let s = vec2<f16>(f16(q.a));
  for (var i = 0u; i < 4u; i++) {
    put4(o + 4u * i * WST, q.lo[i], s);
    put4(o + (16u + 4u * i) * WST, q.hi[i], s);
  }
}
