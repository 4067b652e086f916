"""Variant trees of the decode-batch matrix-unit kernel (shaders/gemm_mmv.wgsl), for timing against main on the
GPU machine: a copy of oxigpu/ and dev/ with one file rewritten (the kernel or its tuning).

    python3 dev/mmv_variants.py pf2 .wt/pf2     # then, on the GPU machine, in .wt/pf2:
        python3 -m pytest -q tests/...            # (carry tests/ too: cp -r tests .wt/pf2)
        python3 -m oxigpu bench -m F --batch 16 -p 512 -n 128 -r 1

``rows5``: decode batches of 5-8 rows on it too (tuning.py). ``pf2``: two steps' loads in flight instead of
one. A step is one barrier, so every step waits for its workgroup's slowest load; with one step read ahead
the 8B's gate + up rows ran at ~820 GB/s (docs/perf-log.md, eighteenth session). The step loop is unrolled by
two with a register set per half, so that no load's destination is moved before it lands (a move would wait
for it).
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LOOP_BEGIN = "  if (t0 < t1) { fetch(n0, t0, e, lid); }\n"
LOOP_END = "  workgroupBarrier();   // every slot's last products done: the slots take the results\n"

MMA = """    for (var kk = 0u; kk < 128u; kk += 16u) {{
      let a = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(bufferView<array<f16, SMH>>(&sm, 0), {xo} + kk,
                                                                    false, LDK);
      let b = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>>(bufferView<array<f16, SMH>>(&sm, 0),
                                                                     slot + kk, true, LDK);
      c = subgroupMatrixMultiplyAccumulate(a, b, c);
    }}
"""

PF2_LOOP = """  var ua: U;
  var ub: U;
  var xa: array<vec4<u32>, XPL>;
  var xb: array<vec4<u32>, XPL>;
  if (t0 < t1) { ua = load_w(n0 + e / 2u, t0, e); xa = load_x(t0, lid); }
  if (t0 + 1u < t1) { ub = load_w(n0 + e / 2u, t0 + 1u, e); xb = load_x(t0 + 1u, lid); }
  for (var t = t0; t < t1; t += 2u) {
    ur = ua; xr = xa;
    stage(t, e, lid);
    workgroupBarrier();
    if (t + 2u < t1) { ua = load_w(n0 + e / 2u, t + 2u, e); xa = load_x(t + 2u, lid); }
""" + MMA.format(xo="(XB + (t % 2u) * SLOT)") + """    if (t + 1u < t1) {
      ur = ub; xr = xb;
      stage(t + 1u, e, lid);
      workgroupBarrier();
      if (t + 3u < t1) { ub = load_w(n0 + e / 2u, t + 3u, e); xb = load_x(t + 3u, lid); }
""" + MMA.format(xo="(XB + ((t + 1u) % 2u) * SLOT)").replace("\n    ", "\n      ").replace("    for", "      for", 1) \
    + """    }
  }
"""

LOAD_X = """
// Step t's share of x (zeros past the live rows), as a value.
fn load_x(t: u32, lid: u32) -> array<vec4<u32>, XPL> {
  var v: array<vec4<u32>, XPL>;
  let mlim = min(D.m, P.n_tokens);
  for (var i = 0u; i < XPL; i++) {
    let w = lid + 32u * S * i;
    if (w < 256u && w / 16u < mlim) { v[i] = XH[(w / 16u) * (D.k / 8u) + 16u * t + w % 16u]; }
  }
  return v;
}

@compute @workgroup_size(32 * S)"""


def pf2(src: str) -> str:
    i, j = src.index(LOOP_BEGIN), src.index(LOOP_END)
    src = src[:i] + PF2_LOOP + src[j:]
    return src.replace("\n@compute @workgroup_size(32 * S)", LOAD_X, 1)


def rows5(src: str) -> str:
    """tuning.py: 5-16 rows on gemm_mmv (its cost does not grow with the rows up to 16; the GEMV's does)."""
    old = "m=(9, 16), n=(4096, INF), k=(4096, INF)"
    assert old in src and "mmv_min_rows: int = 9" in src
    return src.replace(old, "m=(5, 16), n=(4096, INF), k=(4096, INF)").replace("mmv_min_rows: int = 9",
                                                                             "mmv_min_rows: int = 5")


VARIANTS = {"pf2": ("shaders/gemm_mmv.wgsl", pf2), "rows5": ("backends/wgpu/tuning.py", rows5)}


def main() -> None:
    name, dest = sys.argv[1], Path(sys.argv[2])
    if dest.exists():
        shutil.rmtree(dest)
    for d in ("oxigpu", "dev"):
        shutil.copytree(ROOT / d, dest / d, ignore=shutil.ignore_patterns("__pycache__"))
    rel, edit = VARIANTS[name]
    path = dest / "oxigpu" / rel
    path.write_text(edit(path.read_text()))
    print(f"{dest}: {rel} as {name}")


if __name__ == "__main__":
    main()
