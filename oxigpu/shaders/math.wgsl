// Small numeric helpers shared by kernel families.

// tanh that cannot produce inf/inf = NaN for large |x| on implementations that expand it via exp.
fn safe_tanh(x: f32) -> f32 { return tanh(clamp(x, -15.0, 15.0)); }

const NEG_BIG: f32 = -3.0e38;   // "minus infinity" for masked scores, finite so no inf - inf NaNs
