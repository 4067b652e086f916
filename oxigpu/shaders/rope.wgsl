// Rotary position embedding; row t is at position P.pos + t. One thread per (row, head, pair).
// Normal (GPT-J) rotates pairs (2i, 2i+1), NEOX rotates (i, i + NROT/2); dims >= NROT pass through.
//
// Angles are formed in fixed point, exactly, with u32 ops only: TURN_HI/TURN_LO hold
// f_i / (2 pi) = freq_scale * base^(-2i/NROT) / (2 pi) as a 64-bit binary fraction (host, float64), and
// frac(p * f_i / (2 pi)) = p * TURN_HI + mulhi(p, TURN_LO) mod 2^32 is the angle in 2^-32 turns. So the
// angle error is ~1e-7 rad at any position (an f32 p * f loses 1e-3 rad by position 30000).
// HAS_FF (bool): llama-3 frequency factors divide f_i; where a factor is not 1 (low frequencies, small
// angles) the angle is p * FREQ_i / ff_i in f32 with a Cody-Waite reduction.
// Defines: NT (threads: rows * NH * HD/2), NH, HD, NROT, NEOX (bool), HAS_FF, TURN_HI, TURN_LO, FREQ.
#include "common/params.wgsl"

@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> ff: array<f32>;

const HALF: u32 = {{NROT}}u / 2u;
var<private> TURN_HI: array<u32, HALF> = array<u32, HALF>({{TURN_HI}});
var<private> TURN_LO: array<u32, HALF> = array<u32, HALF>({{TURN_LO}});
var<private> FREQ: array<f32, HALF> = array<f32, HALF>({{FREQ}});

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
      let th = f32(p) * (FREQ[j] / ff[j]);
      let k = round(th / TWO_PI);
      return (th - k * 6.28125) - k * 1.9353071795864769e-3;   // 2 pi = 6.28125 + 1.935e-3
    }
  }
  let turns = p * TURN_HI[j] + mulhi(p, TURN_LO[j]);
  return f32(bitcast<i32>(turns)) * (TWO_PI / 4294967296.0);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let id = (wid.y * nwg.x + wid.x) * 256u + lid;
  if (id >= {{NT}}u) { return; }
  let j = id % ({{HD}}u / 2u);
  let row_head = id / ({{HD}}u / 2u);          // t * NH + h
  let t = row_head / {{NH}}u;
  let base = row_head * {{HD}}u;
  if (j >= HALF) {                               // pass-through tail of a partial rotation
    let c = base + {{NROT}}u + 2u * (j - HALF);
    y[c] = x[c];
    y[c + 1u] = x[c + 1u];
    return;
  }
  var i0 = base + 2u * j;
  var i1 = i0 + 1u;
  if ({{NEOX}}) { i0 = base + j; i1 = i0 + HALF; }
  let a = rope_angle(P.pos + t, j);
  let c = cos(a);
  let s = sin(a);
  let x0 = x[i0];
  let x1 = x[i1];
  y[i0] = x0 * c - x1 * s;
  y[i1] = x0 * s + x1 * c;
}
