// attention.wgsl's prefill output where each row block walks all of its keys: O / l straight to dst.

// Output vec4 column c4 of row rg (skipped past the last row and, TILES, for rows of other tiles; rows
// without keys get zeros).
fn store_o(rg: u32, kvh: u32, c4: u32, o: vec4<f32>, l: f32) {
  if (rg >= ROWS || !in_tile(rg)) { return; }
  let t = rg / G;
  dst[(t * NH + kvh * G + rg % G) * DV4 + c4] = select(vec4<f32>(0.0), o / l, l > 0.0);
}

fn store_ml(rg: u32, kvh: u32, m: f32, l: f32) {}
