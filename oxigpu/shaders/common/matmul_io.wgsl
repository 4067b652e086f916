// Bindings and shape uniform shared by the GEMV and GEMM kernels (y = x @ W.T + bias).
// W is bound per row chunk when the weight exceeds the storage-binding limit: `rows` rows starting at
// output column `col0`; row r of the chunk starts at byte r * row_bytes of the W binding.
struct Dims {
  k: u32,          // inner dimension (multiple of 8)
  n: u32,          // output columns (row stride of Y)
  rows: u32,       // weight rows in this chunk
  col0: u32,       // output column of the chunk's first row
  row_bytes: u32,  // bytes per weight row
  m: u32,          // rows of x / Y
  _p0: u32, _p1: u32,
}
@group(0) @binding(1) var<uniform> D: Dims;
@group(0) @binding(2) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> W: array<u32>;
@group(0) @binding(4) var<storage, read> B: array<f32>;
@group(0) @binding(5) var<storage, read_write> Y: array<f32>;

const HAS_BIAS: bool = {{HAS_BIAS}};

fn bias_at(col: u32) -> f32 {
  if (HAS_BIAS) { return B[col]; }
  return 0.0;
}
