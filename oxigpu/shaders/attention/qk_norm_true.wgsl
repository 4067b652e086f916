// kv_rope.wgsl with per-head RMS norms of q and k before the rope (qwen3, olmoe): element e of a head is
// weighted by qn/kn[e] before the rotation; the head's 1 / rms, one scalar, after it (a rotation is linear).
// Defines: QK_EPS.
const QK_NORM: bool = true;
@group(0) @binding(15) var<storage, read> qn: array<f32>;
@group(0) @binding(16) var<storage, read> kn: array<f32>;
fn qn_w(e: u32) -> f32 { return qn[e]; }
fn kn_w(e: u32) -> f32 { return kn[e]; }
