"""Prefill attention on the matrix units (shaders/attention_mma.wgsl): where it applies, its tile, and the
generated code.

Subgroup matrices are values, so their loads, products and stores (and the 16-byte staging registers,
named variables rather than private arrays: see ops/attention_prefill.py) are unrolled here and
substituted into the shader as ``{{QLOAD}}``, ``{{S_MMA}}`` ... blocks. A matrix declared inside the
tile loop is not zeroed again on each pass by Dawn on NVIDIA (seen: a loop-local ``var s:
subgroup_matrix_result`` kept the last tile's sums), so each tile's scores start from
``subgroupMatrixMultiply`` and the O accumulators are declared once, before the loop.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..tuning import GPU, tuning

MAX_HEAD = 128
"""Widest head the kernel takes: Q's D / 16 fragments, O's DV / 16 blocks and the staging registers live
in registers (~200 a lane at 128)."""

@dataclass(frozen=True)
class MmaTile:
    """NSG subgroups (16 query rows each), BK keys per tile; W: K and V staged a word per lane (rows side
    by side, conflict-free 4-byte stores) rather than 16 bytes per lane (f16 caches only)."""

    NSG: int = 4
    BK: int = 64
    W: bool = False

    @property
    def BQ(self) -> int:
        return 16 * self.NSG

    @property
    def WG(self) -> int:
        return 32 * self.NSG

    def shared_bytes(self, d: int, dv: int) -> int:
        """Workgroup memory: the Q/K/V staging rows, the f32 scores, the f16 probabilities, the flags."""
        ld = max(d, dv) + 8
        return 2 * max(self.BQ, self.BK) * ld + 4 * self.BQ * (self.BK + 4) + 2 * self.BQ * (self.BK + 8) + 16


def mma_tile(d: int, dv: int, limit: int, tile: str | None = None, device: str = GPU) -> MmaTile | None:
    """The tile for head dims d/dv under a workgroup-memory limit (the first of the class's
    ``PrefillTuning.mma_tiles`` that fits), or None where the kernel does not apply (head dims not
    multiples of 16 or over MAX_HEAD). ``tile`` ("NSG:BK") forces one."""
    if d % 16 or dv % 16 or max(d, dv) > MAX_HEAD:
        return None
    if tile:
        nsg, bk = tile.rstrip("w").split(":")
        cands = [MmaTile(int(nsg), int(bk), tile.endswith("w"))]
    else:
        cands = [MmaTile(*t) for t in tuning(device).prefill.mma_tiles]
    for t in cands:
        unit = 2 if t.W else 8     # halves a lane stages at a time
        if t.BK % 16 or t.BK * d // unit % t.WG or t.BK * dv // unit % t.WG:
            continue
        if t.shared_bytes(d, dv) <= limit:
            return t
    if tile:
        raise ValueError(f"attention: matrix-unit tile {tile} does not fit (head dims {d}/{dv}, "
                         f"{limit} bytes of workgroup memory)")
    return None


def mma_defines(tile: MmaTile, d: int, dv: int) -> dict[str, str | int]:
    """The shader's NSG, BK and generated blocks for head dims d/dv."""
    L, R, A = ("subgroup_matrix_left<f16, 16, 16>", "subgroup_matrix_right<f16, 16, 16>",
               "subgroup_matrix_result<f32, 16, 16>")
    mma = "subgroupMatrixMultiplyAccumulate"
    nq, no, ns = d // 16, dv // 16, tile.BK // 16
    unit, sfx = (2, "w") if tile.W else (8, "8")
    nlk, nlv = tile.BK * d // unit // tile.WG, tile.BK * dv // unit // tile.WG

    def load(reg: str, n: int, k0: str, v: bool, decl: str) -> list[str]:
        flag = "true" if v else "false"
        return [f"  {decl}{reg}{i} = load{sfx}({k0}, hi, kvh, lid + {i * tile.WG}u, {flag});" for i in range(n)]

    def store(reg: str, n: int, v: bool) -> list[str]:
        flag = "true" if v else "false"
        return [f"    store{sfx}(lid + {i * tile.WG}u, {reg}{i}, {flag});" for i in range(n)]

    qload = [f"  let qa{i} = subgroupMatrixLoad<{L}>(&kv, 16u * sg * LD + {16 * i}u, false, LD);" for i in range(nq)]
    s_mma = []
    for i in range(nq):
        for j in range(ns):   # K^T: (k = d, n = key), column-major from kv [key][d]
            kb = f"subgroupMatrixLoad<{R}>(&kv, {16 * j}u * LD + {16 * i}u, true, LD)"
            s_mma.append(f"    var s{j} = subgroupMatrixMultiply<f32>(qa0, {kb});" if i == 0 else
                         f"    s{j} = {mma}(qa{i}, {kb}, s{j});")
    s_mma += [f"    subgroupMatrixStore(&ss, 16u * sg * SL + {16 * j}u, s{j}, false, SL);" for j in range(ns)]
    pv = []
    for kk in range(ns):      # P (16 rows x 16 keys) times V (k = key, n = dv), row-major from kv [key][dv]
        pv.append(f"    let pa{kk} = subgroupMatrixLoad<{L}>(&ps, 16u * sg * PL + {16 * kk}u, false, PL);")
        for j in range(no):
            vb = f"subgroupMatrixLoad<{R}>(&kv, {16 * kk}u * LD + {16 * j}u, false, LD)"
            pv.append(f"    o{j} = {mma}(pa{kk}, {vb}, o{j});")
    rescale, out = [], []
    for g0 in range(0, no, ns):   # groups of ns blocks: BK columns of this subgroup's ss rows
        grp = range(g0, min(g0 + ns, no))
        width = 16 * len(grp)
        put = [f"  subgroupMatrixStore(&ss, 16u * sg * SL + {16 * (j - g0)}u, o{j}, false, SL);" for j in grp]
        rescale += ["  " + s for s in put] + [
            "      workgroupBarrier();",
            f"      for (var c = c0; c < min(c0 + CPL, {width}u); c++) {{ ss[row * SL + c] *= alpha; }}",
            "      workgroupBarrier();"] + [
            f"      o{j} = subgroupMatrixLoad<{A}>(&ss, 16u * sg * SL + {16 * (j - g0)}u, false, SL);" for j in grp]
        out += put + [
            "  workgroupBarrier();",
            "  if (live) {",
            f"    for (var c = c0; c < min(c0 + CPL, {width}u); c++) {{",
            f"      put_out(t, h, {16 * g0}u + c, ss[row * SL + c], inv);",
            "    }",
            "  }",
            "  workgroupBarrier();"]
    cpl = tile.BK // 2
    sm_read, sm_write = [], []
    for i in range(cpl):   # this lane's scores of the tile in registers (masked: NEG_BIG), their maximum
        sm_read += [f"    let c_{i} = c0 + (({i}u + rot) & {cpl - 1}u);",
                    f"    let v_{i} = select(NEG_BIG, softcap(ss[row * SL + c_{i}]), "
                    f"k0 + c_{i} >= keys.x && k0 + c_{i} < keys.y);",
                    f"    mt = max(mt, v_{i});"]
        sm_write += [f"    let h_{i} = f16(select(0.0, exp(v_{i} - m), v_{i} > NEG_BIG));",
                     f"    l += f32(h_{i});",     # the sum of what PV multiplies
                     f"    ps[row * PL + c_{i}] = h_{i};"]
    blocks = {
        "SM_READ": sm_read,
        "SM_WRITE": sm_write,
        "QLOAD": qload,
        "K_LOAD": load("rk", nlk, "k0", False, "var "),
        "K_LOAD_NEXT": ["  " + s for s in load("rk", nlk, "nk", False, "")],
        "K_STORE": store("rk", nlk, False),
        "V_LOAD": ["  " + s for s in load("rv", nlv, "k0", True, "let ")],
        "V_STORE": store("rv", nlv, True),
        "S_MMA": s_mma,
        "ODECL": [f"  var o{j}: {A};" for j in range(no)],
        "O_RESCALE": rescale,
        "PV_MMA": pv,
        "O_OUT": out,
    }
    return {"NSG": tile.NSG, "BK": tile.BK, **{k: "\n".join(v) for k, v in blocks.items()}}
