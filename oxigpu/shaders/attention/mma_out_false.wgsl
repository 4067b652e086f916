// attention_mma.wgsl's output where each row block walks all of its keys: O / l straight to dst.
fn put_out(t: u32, h: u32, c: u32, v: f32, inv: f32) { dst[(t * NH + h) * DV + c] = v * inv; }
fn put_ml(t: u32, h: u32, m: f32, l: f32) {}
