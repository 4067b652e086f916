// Split-k of the prefill GEMMs (gemm_tiled.wgsl, gemm_q8.wgsl, gemm_mma.wgsl), for outputs too narrow to
// fill the GPU: workgroup z of the grid covers inner elements k_range(z) and writes its raw partial sums
// to a scratch buffer; gemm_reduce.wgsl adds them up in z order (deterministic) and stores through
// store(). The including kernel defines BK (inner elements per step) and SPLITS.

// Inner elements [x, y) of split z: k / SPLITS rounded up to BK per split (the last ones may be empty).
fn k_range(z: u32) -> vec2<u32> {
  if (SPLITS == 1u) { return vec2<u32>(0u, D.k); }
  let kper = ((D.k + SPLITS - 1u) / SPLITS + BK - 1u) / BK * BK;
  let kbeg = min(z * kper, D.k);
  return vec2<u32>(kbeg, min(kbeg + kper, D.k));
}

// Column n (of this chunk's rows) of row m: through store(), or as split z's partial sum into
// Y = a scratch buffer [SPLITS][m][rows] (gemm_reduce.wgsl adds them).
fn put_y(z: u32, m: u32, n: u32, v: f32) {
  if (SPLITS > 1u) {
    Y[(z * D.m + m) * D.rows + n] = v;
  } else {
    store(m, D.col0 + n, v);
  }
}

