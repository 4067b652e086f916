// Row tiles of the prefill kernels (attention.wgsl, attention_mma.wgsl) over rows of several sequences
// (TILES: paged plans of several slots; FlashAttention's varlen tiles, built by each workgroup from row_seq
// and positions, no pass before). A tile holds the rows (t, g) of one sequence whose position-row p G + g
// falls in one bucket of BQ: tiles start where a bucket starts and where a run of the sequence's rows starts
// (rows of a sequence are contiguous and in position order), so no tile mixes sequences and each sees one
// key range. Padding rows (t >= n_tokens) are a run of their own (positions t - n_tokens): their tiles see
// no keys and write zeros. Each workgroup counts the tile starts per token, scans the counts across its THR
// threads and takes its tile, the last ones first (the later rows of a sequence see more keys). The includer
// defines THR, BQ, G and T and includes common/paged_true.wgsl and common/params.wgsl.

const TPT: u32 = ({{T}}u + THR - 1u) / THR;   // tokens per thread in the scan
var<workgroup> tsc: array<u32, THR>;
var<workgroup> tile_w: vec4<u32>;             // (first token, first head, found, -) of this workgroup's tile
// (a vec4, not a vec3: a 12-byte workgroup variable misaligned the matrix-unit kernel's staged rows on
// NVIDIA's driver, as an 8-byte one did: attention_mma.wgsl keeps every workgroup variable 16-byte sized)
var<private> tile_seq: u32 = 0u;              // its sequence (0xFFFFFFFF: padding)
var<private> tile_bucket: u32;                // its bucket of position-rows

fn tok_seq(t: u32) -> u32 {
  if (t >= P.n_tokens) { return 0xFFFFFFFFu; }
  return seq_of(t);
}

fn tok_pos(t: u32) -> u32 {
  if (t >= P.n_tokens) { return t - P.n_tokens; }
  return pos_of(t);
}

fn run_start(t: u32) -> bool { return t == 0u || tok_seq(t) != tok_seq(t - 1u); }

// The tile starts among token t's G rows, and the head of the k-th.
fn tile_starts(t: u32) -> u32 {
  let base = tok_pos(t) * G;
  let first = (BQ - base % BQ) % BQ;           // the first bucket start at or after the token's row 0
  var n = 0u;
  if (first < G) { n = (G - 1u - first) / BQ + 1u; }
  if (run_start(t) && base % BQ != 0u) { n += 1u; }
  return n;
}

fn tile_head(t: u32, k: u32) -> u32 {
  let base = tok_pos(t) * G;
  let first = (BQ - base % BQ) % BQ;
  if (run_start(t) && base % BQ != 0u) { return select(first + (k - 1u) * BQ, 0u, k == 0u); }
  return first + k * BQ;
}

// Tile number wi of this workgroup's KV head, counted from the last: (first token, first head, 1), or
// (0, 0, 0) where there are fewer tiles. Call in uniform control flow; the result is uniform.
fn find_tile(lid: u32, wi: u32) -> vec3<u32> {
  var c = 0u;
  for (var i = 0u; i < TPT; i++) {
    let t = lid * TPT + i;
    if (t < {{T}}u) { c += tile_starts(t); }
  }
  tsc[lid] = c;
  if (lid == 0u) { tile_w = vec4<u32>(0u); }
  workgroupBarrier();
  for (var d = 1u; d < THR; d <<= 1u) {        // inclusive scan of the counts
    let v = select(0u, tsc[max(lid, d) - d], lid >= d);
    workgroupBarrier();
    tsc[lid] += v;
    workgroupBarrier();
  }
  let total = tsc[THR - 1u];
  if (wi < total) {
    let want = total - 1u - wi;
    var e = tsc[lid] - c;
    for (var i = 0u; i < TPT; i++) {
      let t = lid * TPT + i;
      if (t < {{T}}u) {
        let n = tile_starts(t);
        if (want >= e && want < e + n) { tile_w = vec4<u32>(t, tile_head(t, want - e), 1u, 0u); }
        e += n;
      }
    }
  }
  let r = workgroupUniformLoad(&tile_w).xyz;
  tile_seq = tok_seq(r.x);
  tile_bucket = (tok_pos(r.x) * G + r.y) / BQ;
  return r;
}

// A step of one sequence (every chunk of a lone prompt): its rows are the slot's positions in order, so
// the kernels take fixed blocks of BQ rows, as plans of one slot do, and skip the tile search (find_tile's scans
// and barriers in every workgroup, in_tile's loads per row).
fn one_seq() -> bool { return P.n_seqs == 1u; }

// Whether row rg (= t G + g) belongs to this workgroup's tile (any row, in a step of one sequence).
fn in_tile(rg: u32) -> bool {
  if (one_seq()) { return true; }
  let t = rg / G;
  return t < {{T}}u && tok_seq(t) == tile_seq && (tok_pos(t) * G + rg % G) / BQ == tile_bucket;
}

// Keys the tile found by find_tile (r) can see: [lo, hi), from its first row's window to its last row's
// position (the tile's last token: a binary search, its rows being a prefix of the BQ from r's). From
// uniform values and read-only inputs only, so the result is uniform (the key loops hold barriers).
fn tile_keys(r: vec3<u32>) -> vec2<u32> {
  let t0 = r.x;
  if (t0 >= P.n_tokens) { return vec2<u32>(0u); }
  let sq = tok_seq(t0);
  let bucket = (tok_pos(t0) * G + r.y) / BQ;
  var a = t0;                                           // in the tile
  var b = min({{T}}u - 1u, t0 + (BQ + G - 1u) / G);    // a bound
  loop {
    if (a >= b) { break; }
    let mid = (a + b + 1u) / 2u;
    if (tok_seq(mid) == sq && tok_pos(mid) * G / BQ <= bucket) { a = mid; } else { b = mid - 1u; }
  }
  let p0 = tok_pos(t0);
  var lo = 0u;
  if (WINDOW > 0u && p0 + 1u > WINDOW) { lo = p0 + 1u - WINDOW; }
  return vec2<u32>(lo, tok_pos(a) + 1u);
}
