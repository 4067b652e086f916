// gemm_mma.wgsl's weight units for the 32-element block types whose block is one unit (Q8_0, Q5_0, Q4_0):
// fetch only reads the QW words that hold the block (from its 2-aligned start's word), and w_put
// decodes them a step later, so the loads land while the matrix units work (q32.wgsl decodes as it
// reads, and the step waits for the loads). The decode, gemm_mma/q32r_<type>.wgsl's q32p, takes the
// block's body words and d (gemm_mma/q32r_put.wgsl block_q32), at constant indices (they stay in registers).
#include "gemm_q8/q32.wgsl"
#include "gemm_q8/{{QUANT}}.wgsl"
#include "gemm_mma/q32r_{{QUANT}}.wgsl"
#include "gemm_mma/q32r_put.wgsl"

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

fn w_put(o: u32, r: QR) {
  if (PAIRED) { put_words(o, r.w, r.mis != 0u); return; }   // the words from the block's word on, as they are
  var b: array<u32, QW>;
  for (var i = 0u; i < QW - 1u; i++) {
    b[i] = select(r.w[i], (r.w[i] >> 16u) | (r.w[i + 1u] << 16u), r.mis != 0u);
  }
  b[QW - 1u] = r.w[QW - 1u] >> r.mis;   // 2 bytes in: its upper half lies past the block (unused)
  put_words(o, b, false);
}
