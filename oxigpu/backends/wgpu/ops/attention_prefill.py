"""Prefill attention (shaders/attention.wgsl): tile choice and the generated register code.

The kernel's per-thread state (an RT x KT score micro-tile, RT x CV vec4 accumulators, the next K/V tile
in flight) lives in named variables, never in private arrays (NVIDIA's compiler puts loop-indexed private
arrays in local memory), so the unrolled statements that touch them are generated here and substituted
into the shader as ``{{DECL}}``, ``{{S_STEP}}`` ... blocks. See the shader's header for the algorithm.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..tuning import GPU, tuning

COMP = "xyzw"


def _odd(n: int) -> int:
    return n | 1


@dataclass(frozen=True)
class PrefillConfig:
    """Launch shape of the prefill kernel for head dims D/DV (vec4 counts d4/dv4)."""

    NKL: int    # key lanes per row group (a power of two dividing dv4)
    NRG: int    # row groups
    RT: int     # rows per thread (1, 2 or 4)
    KT: int     # keys per thread per tile
    d4: int
    dv4: int
    shared: bool = False   # one workgroup buffer for the K tile, then the V tile

    @property
    def THR(self) -> int:
        return self.NKL * self.NRG

    @property
    def BQ(self) -> int:
        return self.NRG * self.RT

    @property
    def BK(self) -> int:
        return self.NKL * self.KT

    @property
    def CV(self) -> int:
        return self.dv4 // self.NKL

    @property
    def QS(self) -> int:
        return _odd(self.d4)

    @property
    def KS(self) -> int:
        return _odd(self.d4)

    @property
    def PS(self) -> int:
        return _odd(self.BK // 4)

    @property
    def NLK(self) -> int:
        return -(-self.BK * self.d4 // self.THR)

    @property
    def NLV(self) -> int:
        return -(-self.BK * self.dv4 // self.THR)

    def smem_bytes(self) -> int:
        kv = self.BK * max(self.KS, self.dv4) if self.shared else self.BK * (self.KS + self.dv4)
        vec4s = self.BQ * self.QS + kv + self.BQ * self.PS + self.THR
        return 16 * vec4s + 4

    def registers(self) -> int:
        """A rough per-thread register estimate: accumulators, scores, prefetch (packed halves, 2 per
        vec4), operands, addresses."""
        return (4 * self.RT * self.CV + self.RT * self.KT + 2 * (self.NLK + self.NLV)
                + 4 * (self.RT + self.KT) + 4 * self.CV + 24)

    def valid(self) -> bool:
        return self.RT in (1, 2, 4) and self.BK % 4 == 0 and self.dv4 % self.NKL == 0 and self.THR <= 256

    def __str__(self) -> str:
        return f"{self.spec} (BQ {self.BQ}, BK {self.BK}, {self.THR} threads)"

    @property
    def spec(self) -> str:
        """NRG:RT:KT, with an ``s`` where K and V share one buffer (the ``prefill_tile`` attr's form)."""
        return f"{self.NRG}:{self.RT}:{self.KT}" + ("s" if self.shared else "")


def _nkl(dv4: int) -> int:
    for n in (8, 4, 2, 1):
        if dv4 % n == 0:
            return n
    return 1


def prefill_config(d: int, dv: int, limit_bytes: int, override: str | tuple | None = None, rows: int = 0,
                   n_kv_head: int = 1, device: str = GPU) -> PrefillConfig | None:
    """The prefill kernel's shape for head dims d/dv within ``limit_bytes`` of workgroup memory: the first
    of the class's candidates (tuning.py ``PrefillTuning``) that fits; None when none does (e.g. D = 256
    in WebGPU's minimum 16 KiB: the decode kernel runs prefill then). ``rows`` (query rows per KV head,
    T * G) and ``n_kv_head`` give the workgroup count, which 64-row tiles must keep at the class's slots.
    ``override`` ("NRG:RT:KT[s]" or a tuple) forces a shape (tests, tuning); it must fit."""
    d4, dv4 = d // 4, dv // 4
    nkl = _nkl(dv4)
    if override:
        spec = override if isinstance(override, str) else ":".join(str(x) for x in override)
        nrg, rt, kt = (int(x) for x in spec.rstrip("s").split(":"))
        cfg = PrefillConfig(nkl, nrg, rt, kt, d4, dv4, spec.endswith("s"))
        if not cfg.valid() or cfg.smem_bytes() > limit_bytes:
            raise ValueError(f"attention: prefill tile {cfg} does not fit ({cfg.smem_bytes()} of "
                             f"{limit_bytes} bytes of workgroup memory)")
        return cfg
    tu = tuning(device)
    for spec in tu.prefill.candidates:
        nrg, rt, kt = (int(x) for x in spec.rstrip("s").split(":"))
        if nkl < 8:   # narrow value heads: the same workgroup size, more keys per lane
            nrg, kt = nrg * 8 // nkl, max(kt, 4 // nkl)
        cfg = PrefillConfig(nkl, nrg, rt, kt, d4, dv4, spec.endswith("s"))
        if rows and cfg.BQ >= 64 and n_kv_head * -(-rows // cfg.BQ) < tu.slots:
            continue
        if cfg.valid() and cfg.smem_bytes() <= limit_bytes and cfg.registers() <= tu.prefill.reg_budget:
            return cfg
    return None


def prefill_defines(cfg: PrefillConfig, scale: str) -> dict[str, object]:
    """The shader's tile defines and generated code blocks (``scale``: the WGSL literal of the score scale)."""
    RT, KT, CV, NKL, NRG, THR = cfg.RT, cfg.KT, cfg.CV, cfg.NKL, cfg.NRG, cfg.THR
    fvn = "fk" if cfg.shared else "fv"
    rows, keys, cols = range(RT), range(KT), range(CV)
    ind = lambda n, lines: "\n".join(" " * n + s for s in lines)   # noqa: E731

    decl = []
    for i in rows:
        decl += [f"let rl{i} = rgi + {NRG * i}u;", f"let rw{i} = unit_window(row_window(rg0 + rl{i}), lo, hi);",
                 f"let qb{i} = rl{i} * QS;", f"let pb{i} = rl{i} * PS;"]
    decl += [f"let kb{j} = (kl + {NKL * j}u) * KS;" for j in keys]
    decl += [f"var o{i}_{c} = vec4<f32>(0.0);" for i in rows for c in cols]
    decl += [f"var pk{s}: KRaw;" for s in range(cfg.NLK)]     # as loaded (load_k: kv/cols_*.wgsl), zero
    decl += [f"var pv{s}: VRaw;" for s in range(cfg.NLV)]

    def guarded(n_slots: int, total: int, stmt: str) -> list[str]:
        out = []
        for s in range(n_slots):
            e = f"lid + {s * THR}u"
            line = stmt.format(s=s, e=e)
            out.append(line if (s + 1) * THR <= total else f"if ({e} < {total}u) {{ {line} }}")
        return out

    nk_tot, nv_tot = cfg.BK * cfg.d4, cfg.BK * cfg.dv4
    load_k = guarded(cfg.NLK, nk_tot, "pk{s} = load_k(nk, hi, kvh, {e});")
    load_v = guarded(cfg.NLV, nv_tot, "pv{s} = load_v(nk, hi, kvh, {e});")
    store_k = guarded(cfg.NLK, nk_tot, "put_k({e}, pk{s});")
    store_v = guarded(cfg.NLV, nv_tot, "put_v({e}, pv{s});")

    s_zero = [f"var s{i}_{j} = 0.0;" for i in rows for j in keys]
    s_step = [f"let q{i} = fq[qb{i} + d];" for i in rows] + [f"let k{j} = fk[kb{j} + d];" for j in keys]
    for x in COMP:
        s_step += [f"s{i}_{j} = fma(q{i}.{x}, k{j}.{x}, s{i}_{j});" for i in rows for j in keys]

    def chain(op: str, names: list[str]) -> str:
        e = names[0]
        for n in names[1:]:
            e = f"{op}({e}, {n})" if op else f"{e} + {n}"
        return e

    sm = [f"let kj{j} = k0 + kl + {NKL * j}u;" for j in keys]
    sm += [f"s{i}_{j} = select(NEG_BIG, softcap(s{i}_{j} * {scale}), kj{j} - rw{i}.x < rw{i}.y);"
           for i in rows for j in keys]
    mx = [chain("max", [f"s{i}_{j}" for j in keys]) for i in rows] + ["NEG_BIG"] * (4 - RT)
    sm += [f"let mx = red_max(lane, sgs, vec4<f32>({', '.join(mx)}));",
           "let mn = max(m, mx);", "let alpha = exp(m - mn);", "m = mn;"]
    sm += [f"let p{i}_{j} = select(0.0, exp(s{i}_{j} - mn.{COMP[i]}), s{i}_{j} > NEG_BIG);"
           for i in rows for j in keys]
    sums = [chain("", [f"p{i}_{j}" for j in keys]) for i in rows] + ["0.0"] * (4 - RT)
    sm += [f"l = l * alpha + vec4<f32>({', '.join(sums)});"]
    sm += [f"o{i}_{c} *= alpha.{COMP[i]};" for i in rows for c in cols]
    sm += [f"put_p(rl{i}, kl + {NKL * j}u, p{i}_{j});" for i in rows for j in keys]

    pv = [f"let pr{i} = fp[pb{i} + k4];" for i in rows]
    for kk in range(4):
        blk = [f"let vb = (4u * k4 + {kk}u) * DV4 + kl;"]
        blk += [f"let v{c} = {fvn}[vb + {NKL * c}u];" for c in cols]
        blk += [f"o{i}_{c} = fma(vec4<f32>(pr{i}.{COMP[kk]}), v{c}, o{i}_{c});" for i in rows for c in cols]
        pv += ["{"] + ["  " + b for b in blk] + ["}"]

    store_o = [f"store_o(rg0 + rl{i}, kvh, kl + {NKL * c}u, o{i}_{c}, l.{COMP[i]});" for i in rows for c in cols]
    # key units (attention/fma_out_true.wgsl; a no-op otherwise): a row's m and l, once per row group
    store_o += ["if (kl == 0u) {"] + [f"  store_ml(rg0 + rl{i}, kvh, m.{COMP[i]}, l.{COMP[i]});" for i in rows] + ["}"]

    fk_len = cfg.BK * (max(cfg.KS, cfg.dv4) if cfg.shared else cfg.KS)
    return {"NKL": NKL, "NRG": NRG, "RT": RT, "KT": KT, "QS": cfg.QS, "KS": cfg.KS, "PS": cfg.PS,
            "SHARED": cfg.shared, "FK_LEN": fk_len, "FV_LEN": 1 if cfg.shared else cfg.BK * cfg.dv4, "FVN": fvn,
            "DECL": ind(2, decl), "LOAD_K": ind(8, load_k), "LOAD_V": ind(8, load_v), "STORE_K": ind(8, store_k),
            "STORE_V": ind(6, store_v), "S_ZERO": ind(4, s_zero), "S_STEP": ind(6, s_step),
            "SOFTMAX": ind(4, sm), "PV_STEP": ind(6, pv), "STORE_O": ind(2, store_o)}
