// kv_store_q.wgsl's hooks for kv_store: k as given, no q.
fn rope_q(id: u32) {}

// Value e of the k row starting at b.
fn k_value(b: u32, e: u32, p: u32) -> f32 { return k[b + e]; }
