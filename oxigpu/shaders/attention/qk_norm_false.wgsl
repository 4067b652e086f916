// kv_rope.wgsl without per-head q/k norms (qk_norm_true.wgsl has them): weights of one, no scale.
const QK_NORM: bool = false;
fn qn_w(e: u32) -> f32 { return 1.0; }
fn kn_w(e: u32) -> f32 { return 1.0; }
