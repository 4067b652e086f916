// The experts' grouped GEMM (ID true; matmul_id's prefill, ops/moe.py): the (token, slot) pairs p = t KSEL + j
// were laid out expert by expert and cut into row tiles of at most BM pairs on the device (matmul_id_gemm.wgsl
// route, into RT: RT[0] tiles, the order at RT[1 ..], RT[IDT + 3i ..] = (expert, first index into the
// order, count) of tile i). Workgroup row tile wid.y takes tile wid.y: tile row m is pair RT[1 + first + m],
// its x row t (XSLOT 0) or p (XSLOT 1, one input per chosen expert), its output row p; the weights are
// its expert's D.rows rows (w_base). W holds experts D._p0 .. D._p1 (a range per dispatch where all of them
// exceed one storage binding); tiles of other experts return at once. Tiles of the pseudo-expert NE hold
// the padded tokens' pairs: they compute nothing and store zeros (in the dispatch of the first range).
// RT is read-only here, so its values at uniform indices are uniform: tile_skip and tile_dead read them (not
// the private copies, which Tint's uniformity analysis does not trust), so the early returns skip no barrier.
const ID: bool = true;
@group(0) @binding(15) var<storage, read> RT: array<u32>;

var<private> w_base: u32 = 0u;   // the first byte of the tile's expert in W
var<private> id_e: u32;
var<private> id_first: u32;
var<private> id_count: u32;

// Tile wy's expert: NE + 1 past the tiles.
fn tile_e(wy: u32) -> u32 {
  return select({{NE}}u + 1u, RT[{{IDT}}u + 3u * wy], wy < RT[0] && P.n_tokens > 0u);
}
fn tile_m0(wy: u32, bm: u32) -> u32 {
  id_e = tile_e(wy);
  id_first = RT[{{IDT}}u + 1u + 3u * wy];
  id_count = select(0u, RT[{{IDT}}u + 2u + 3u * wy], id_e <= {{NE}}u);
  if (id_e < {{NE}}u && id_e >= D._p0) { w_base = (id_e - D._p0) * D.rows * D.row_bytes; }
  return 0u;
}
fn tile_skip(wy: u32, m0: u32) -> bool {
  let e = tile_e(wy);
  return select(e < D._p0 || e >= D._p1, D._p0 != 0u, e == {{NE}}u);
}
fn tile_dead(wy: u32) -> bool { return tile_e(wy) >= {{NE}}u; }
fn x_live(m: u32) -> bool { return m < id_count; }
fn pair_of(m: u32) -> u32 { return RT[1u + id_first + m]; }
fn x_src(m: u32) -> u32 { return select(pair_of(m) / {{KSEL}}u, pair_of(m), {{XSLOT}}u == 1u); }
fn out_ok(m: u32) -> bool { return m < id_count; }
fn out_row(m: u32) -> u32 { return pair_of(m); }
