// The prefill kernels' (attention.wgsl, attention_mma.wgsl) row masking and score cap. The including
// shader defines G, ROWS, WINDOW (0: none) and SOFTCAP (0: none), and includes math.wgsl,
// common/paged_*.wgsl and attention/tiles_*.wgsl.

// Visible keys of query row rg (of a KV head): [x, x + y); y = 0 for padding rows and (TILES) rows of
// other tiles.
fn row_window(rg: u32) -> vec2<u32> {
  let t = rg / G;
  if (rg >= ROWS || t >= P.n_tokens || !in_tile(rg)) { return vec2<u32>(0u); }
  let p = pos_of(t);
  var lo = 0u;
  if (WINDOW > 0u && p + 1u > WINDOW) { lo = p + 1u - WINDOW; }
  return vec2<u32>(lo, p + 1u - lo);
}

fn softcap(s: f32) -> f32 {
  if (SOFTCAP > 0.0) { return SOFTCAP * safe_tanh(s / SOFTCAP); }
  return s;
}

// Keys any live row of the BQ rows from rg0 of ONE sequence can see: [lo, hi). Empty when every row is
// padding. From P and read-only inputs only: uniform (the key loops hold barriers).
fn key_range(rg0: u32) -> vec2<u32> {
  let t_first = rg0 / G;
  if (t_first >= P.n_tokens) { return vec2<u32>(0u); }
  let t_last = min((rg0 + BQ - 1u) / G, min({{T}}u, P.n_tokens) - 1u);
  let p0 = pos_of(t_first);
  var lo = 0u;
  if (WINDOW > 0u && p0 + 1u > WINDOW) { lo = p0 + 1u - WINDOW; }
  return vec2<u32>(lo, pos_of(t_last) + 1u);
}
