// Key units of the prefill attention kernels (attention_mma.wgsl, attention.wgsl): one sequence's row
// blocks each cut their keys at fixed positions into units, a workgroup each (workgroup id = unit * the
// row blocks' workgroups + its block's), whose partial O, m and l (attention/*_out_true.wgsl) are merged by
// attention_merge_units.wgsl: long contexts fill the GPU where the chunk's row blocks alone do not.
// The including shader defines BK and includes common/paged_*.wgsl (pos_of). Defines: NU (most units; 1:
// none), KU (keys per unit, or 0: unit_keys below), WGS (row blocks over all KV heads), RS (resident
// workgroups to fill), LONGK (the most keys a unit), T.
const NU: u32 = {{NU}}u;
const KU: u32 = {{KU}}u;
const WGS: u32 = {{WGS}}u;
const RS: u32 = {{RS}}u;
const LONGK: u32 = {{LONGK}}u;
var<private> unit: u32 = 0u;       // this workgroup's (the output functions' index)

// Keys per unit: KU, or the chunk's keys (its last row's) cut so that the units' workgroups make RS
// resident ones (one wave: the last unit's remainder is short and runs in the slots left over), at most
// LONGK keys a unit and at most NU units; a multiple of BK. From P and the positions only: the same for
// every workgroup of a step.
fn unit_keys() -> u32 {
  if (KU > 0u) { return KU; }
  let keys = pos_of(min({{T}}u, P.n_tokens) - 1u) + 1u;
  let fill = (keys * WGS + RS - 1u) / RS;
  let ku = max(min(fill, LONGK), (keys + NU - 1u) / NU);
  return (ku + BK - 1u) / BK * BK;
}

// A row block's key range [r.x, r.y) cut to unit u's keys (empty: x >= y).
fn unit_range(r: vec2<u32>, u: u32) -> vec2<u32> {
  let ku = unit_keys();
  return vec2<u32>(max(r.x, u * ku), min(r.y, u * ku + ku));
}

// A row's visible keys [w.x, w.x + w.y) cut to its block's unit range [lo, hi).
fn unit_window(w: vec2<u32>, lo: u32, hi: u32) -> vec2<u32> {
  if (NU == 1u) { return w; }
  let a = max(w.x, lo);
  let b = min(w.x + w.y, hi);
  return vec2<u32>(a, select(0u, b - a, b > a));
}
