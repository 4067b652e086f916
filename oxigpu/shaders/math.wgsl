// Small numeric helpers shared by kernel families.

// tanh that cannot produce inf/inf = NaN for large |x| on implementations that expand it via exp.
fn safe_tanh(x: f32) -> f32 { return tanh(clamp(x, -15.0, 15.0)); }

const NEG_BIG: f32 = -3.0e38;   // "minus infinity" for masked scores, finite so no inf - inf NaNs

// Gated-FFN activations (glu, and the GEMV's GLU epilogue).
fn silu(x: f32) -> f32 { return x / (1.0 + exp(-x)); }

// tanh form of GELU (gemma).
fn gelu_tanh(x: f32) -> f32 {
  return 0.5 * x * (1.0 + safe_tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
