// Rotary position embedding of one pair of a head, shared by rope.wgsl, rope_kv.wgsl (which rotates k
// two adjacent elements at a time: rope_elem) and attention/kv_rope.wgsl (whole vec4 columns: rope_col).
// Normal (GPT-J) rotates pairs (2i, 2i+1), NEOX rotates (i, i + NROT/2); dims >= NROT pass through.
//
// Angles are formed in fixed point, exactly, with u32 ops only: TURN_HI/TURN_LO hold
// f_i / (2 pi) = freq_scale * base^(-2i/NROT) / (2 pi) as a 64-bit binary fraction (host, float64), and
// frac(p * f_i / (2 pi)) = p * TURN_HI + mulhi(p, TURN_LO) mod 2^32 is the angle in 2^-32 turns. So the
// angle error is ~1e-7 rad at any position (an f32 p * f loses 1e-3 rad by position 30000).
// HAS_FF (bool): llama-3 frequency factors divide f_i; where a factor is not 1 (low frequencies, small
// angles) the angle is p * f_i / ff_i in f32 with a Cody-Waite reduction. The including shader
// declares the `ff` binding. Defines: HD, NROT, NEOX (bool), HAS_FF, ROPE_BINDING (the binding of the
// table ops/rope.py rope_table uploads: TURN_HI, TURN_LO and f_i's bits per pair; a storage buffer, not
// private arrays, which NVIDIA's compiler copies into every invocation's local memory).

const HALF: u32 = {{NROT}}u / 2u;
@group(0) @binding({{ROPE_BINDING}}) var<storage, read> rope_tab: array<vec4<u32>>;

fn rope_turn(j: u32) -> vec2<u32> { return rope_tab[j].xy; }
fn rope_freq(j: u32) -> f32 { return bitcast<f32>(rope_tab[j].z); }

const TWO_PI: f32 = 6.283185307179586;

// High 32 bits of the 64-bit product a * b, from 16-bit limbs.
fn mulhi(a: u32, b: u32) -> u32 {
  let a0 = a & 0xFFFFu; let a1 = a >> 16u;
  let b0 = b & 0xFFFFu; let b1 = b >> 16u;
  let mid = ((a0 * b0) >> 16u) + ((a0 * b1) & 0xFFFFu) + ((a1 * b0) & 0xFFFFu);
  return a1 * b1 + ((a0 * b1) >> 16u) + ((a1 * b0) >> 16u) + (mid >> 16u);
}

fn rope_angle(p: u32, j: u32) -> f32 {
  if ({{HAS_FF}}) {
    if (ff[j] != 1.0) {
      let th = f32(p) * (rope_freq(j) / ff[j]);
      let k = round(th / TWO_PI);
      return fma(-k, 1.9353071795864769e-3, fma(-k, 6.28125, th));   // 2 pi = 6.28125 + 1.935e-3
    }
  }
  let t = rope_turn(j);
  let turns = p * t.x + mulhi(p, t.y);
  return f32(bitcast<i32>(turns)) * (TWO_PI / 4294967296.0);
}

// Offsets in a head of the two elements that thread j (< HD/2) handles: rotation pair j < HALF, or a
// pass-through pair of a partial rotation's tail.
fn rope_pair(j: u32) -> vec2<u32> {
  if (j >= HALF) { return vec2<u32>({{NROT}}u + 2u * (j - HALF), {{NROT}}u + 2u * (j - HALF) + 1u); }
  if ({{NEOX}}) { return vec2<u32>(j, j + HALF); }
  return vec2<u32>(2u * j, 2u * j + 1u);
}

// The pair's values after the rotation at position p (unchanged in the pass-through tail). The fused
// multiply-adds are written out: a * b - c * d left to the compiler may fuse either product, and not the
// same one in every kernel, while a speculative verification's rows (rotated by rope_kv_store) must equal
// a decode step's (rotated inside its attention kernel) to the bit.
fn rope_rotate(p: u32, j: u32, x: vec2<f32>) -> vec2<f32> {
  if (j >= HALF) { return x; }
  let a = rope_angle(p, j);
  let c = cos(a);
  let s = sin(a);
  return vec2<f32>(fma(x.x, c, -(x.y * s)), fma(x.x, s, x.y * c));
}

// The element that element e of a head is rotated with (itself in the pass-through tail).
fn rope_partner(e: u32) -> u32 {
  if (e >= {{NROT}}u) { return e; }
  if ({{NEOX}}) { return select(e - HALF, e + HALF, e < HALF); }
  return e ^ 1u;
}

// The partners of the four elements of vec4 column c of a head.
fn rope_partners(c: u32) -> vec4<u32> {
  let e = 4u * c;
  return vec4<u32>(rope_partner(e), rope_partner(e + 1u), rope_partner(e + 2u), rope_partner(e + 3u));
}

// Element e of a head after the rotation at position p, from its value x and its partner's xp: the
// component of rope_rotate's result that is e (the arithmetic of rope.wgsl's pairs).
fn rope_elem(p: u32, e: u32, x: f32, xp: f32) -> f32 {
  if (e >= {{NROT}}u) { return x; }
  if ({{NEOX}}) {
    if (e < HALF) { return rope_rotate(p, e, vec2<f32>(x, xp)).x; }
    return rope_rotate(p, e - HALF, vec2<f32>(xp, x)).y;
  }
  if (e % 2u == 0u) { return rope_rotate(p, e / 2u, vec2<f32>(x, xp)).x; }
  return rope_rotate(p, e / 2u, vec2<f32>(xp, x)).y;
}

// Vec4 column c of a head (elements 4c .. 4c+3) after the rotation at position p; xp holds the values
// of their partners (rope_partners).
fn rope_col(p: u32, c: u32, x: vec4<f32>, xp: vec4<f32>) -> vec4<f32> {
  let e = 4u * c;
  return vec4<f32>(rope_elem(p, e, x.x, xp.x), rope_elem(p, e + 1u, x.y, xp.y),
                   rope_elem(p, e + 2u, x.z, xp.z), rope_elem(p, e + 3u, x.w, xp.w));
}
