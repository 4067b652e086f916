// The weight interface of the gemm_q8/<type>.wgsl snippets, shared by gemm_q8.wgsl (integer dots) and
// gemm_mma.wgsl (dequantized to f16 for the matrix units): q32(blk, j) returns sub-block j of the block
// at byte blk (q32_at: of a weight row), and the helpers they read W with.
// 32 weights as int8 (lo: elements 0..15, hi: 16..31, byte 0 first) with a, b: the scales of the two
// halves (FK 16) or the scale and the min (FK 32; min 0 without HM).
struct Q32 { lo: vec4<u32>, hi: vec4<u32>, a: f32, b: f32 }

// The 16 bytes at the 4-aligned byte b of W.
fn lw16a(b: u32) -> vec4<u32> {
  let w = b >> 2u;
  return vec4<u32>(W[w], W[w + 1u], W[w + 2u], W[w + 3u]);
}

// The 16 bytes at the 2-aligned byte b of W (the 2-aligned block types in GGUF's layout: TQ1_0, TQ2_0;
// the paired ones read lw16a: backends/wgpu/layout.py): branch-free, since
// neighbouring rows may differ in alignment.
fn lw16(b: u32) -> vec4<u32> {
  let w = b >> 2u;
  let a = vec4<u32>(W[w], W[w + 1u], W[w + 2u], W[w + 3u]);
  let c = vec4<u32>(a.yzw, W[w + 4u]);
  return select(a, (a >> vec4<u32>(16u)) | (c << vec4<u32>(16u)), (b & 2u) != 0u);
}

// Bytes of v (each < 128 + off) minus off, as int8.
fn s8(v: vec4<u32>, off: u32) -> vec4<u32> {
  return (v + vec4<u32>((128u - off) * 0x01010101u)) ^ vec4<u32>(0x80808080u);
}


// 32-block j of weight row n of this chunk; zero past the rows or past k.
fn q32_at(n: u32, j: u32) -> Q32 {
  if (n < D.rows && j < D.k / 32u) {
    return q32(w_base + n * D.row_bytes + (j / (QK / 32u)) * QB, j % (QK / 32u));
  }
  return Q32(vec4<u32>(0u), vec4<u32>(0u), 0.0, 0.0);
}
