// gemm_mma/q32r.wgsl with 16-byte loads (TileConfig.raw16; untimed): fetch reads the NV 16-byte words that
// hold the block (its 2-aligned start and length fit them: gemm_mma/q32r_<type>.wgsl), 2-3 load
// instructions where q32r.wgsl's 32-bit reads take 5-9, each touching 32 rows; w_put aligns them (3
// selects a word) and decodes them a step later. W is bound as 16-byte words (W4) only: ops/gemm.py binds
// it so.
#include "gemm_q8/q32.wgsl"
#include "gemm_q8/{{QUANT}}.wgsl"
#include "gemm_mma/q32r_{{QUANT}}.wgsl"
#include "gemm_mma/q32r_put.wgsl"

@group(0) @binding(12) var<storage, read> W4: array<vec4<u32>>;

const WU: u32 = 32u;     // halves per weight unit: one 32-block
struct QR { v: array<vec4<u32>, NV>, at: u32 }   // the words around the block; at: its byte offset in v[0]
alias WBlock = QR;

// 32-block j of weight row n; zero past the rows or past k.
fn w_load(n: u32, j: u32) -> QR {
  if (n < D.rows && j < D.k / 32u) { return w_fast(n, j); }
  return QR(array<vec4<u32>, NV>(), 0u);
}

// w_load inside W (fetch's tiles wholly inside it): unchecked.
fn w_fast(n: u32, j: u32) -> QR {
  let blk = w_base + n * D.row_bytes + j * QB;
  let q = blk >> 4u;
  var r: QR;
  r.at = blk & 15u;
  for (var i = 0u; i < NV; i++) {   // only words that hold block bytes: nothing past W's last one is read
    if (16u * i < r.at + QB) { r.v[i] = W4[q + i]; }
  }
  return r;
}

// Word i of the NV 16-byte words (0 past them).
fn vword(v: array<vec4<u32>, NV>, i: u32) -> u32 {
  if (i >= 4u * NV) { return 0u; }
  return v[i / 4u][i % 4u];
}

fn w_put(o: u32, r: QR) {
  let s = r.at >> 2u;         // whole words in, 0..3
  let sh = (r.at & 2u) * 8u;  // and 16 bits more where the block starts mid-word
  var b: array<u32, QW>;
  for (var i = 0u; i < QW; i++) {   // unrolled: every vword index is a constant, each word 3 selects
    let w0 = select(select(vword(r.v, i), vword(r.v, i + 1u), s == 1u),
                    select(vword(r.v, i + 2u), vword(r.v, i + 3u), s == 3u), s >= 2u);
    let w1 = select(select(vword(r.v, i + 1u), vword(r.v, i + 2u), s == 1u),
                    select(vword(r.v, i + 3u), vword(r.v, i + 4u), s == 3u), s >= 2u);
    b[i] = select(w0, (w0 >> 16u) | (w1 << 16u), sh != 0u && !PAIRED);   // paired: the words as they are
  }
  put_words(o, b, sh != 0u);
}
