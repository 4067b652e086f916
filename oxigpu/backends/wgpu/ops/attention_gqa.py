"""The grouped-query decode attention (shaders/attention_decode_gqa.wgsl): where it runs, its launch shape
and its unrolled code.

One team of L lanes (one or two vec4 columns of the head a lane) takes every query row of a token's KV
head, so each K and V column is loaded and widened once for the G rows (attention_decode.wgsl loads it
once per row). It needs a subgroup of at least L lanes, so it runs where the adapter guarantees one
(``Device.subgroup_min_size``) and the tuning class takes the head dim (``DecodeTuning.gqa``); attr
``decode_gqa`` (0 / 1) overrides both and ``team_lanes`` narrows the team (two columns a lane), for tests
and A/B runs."""
from __future__ import annotations

from ..tuning import GPU, tuning

MAX_LANES = 32
"""Widest team by default (a warp): 256-wide heads take two columns a lane."""


def gqa_shape(d: int, dv: int, g: int, lanes: int = 0) -> tuple[int, int, int] | None:
    """(L, NC, GP): team lanes, vec4 columns a lane and the rows padded to a power of two, for head dims d /
    dv and G = g query heads per KV head (``lanes``: the team's width, else D / 4 up to MAX_LANES); None
    where the kernel does not apply (different K and V widths, one query head per KV head, a width that
    is not a power of two vec4s, more than two columns a lane, more padded rows than lanes)."""
    d4 = d // 4
    lanes = lanes or min(d4, MAX_LANES)
    if d != dv or g < 2 or d % 4 or d4 & (d4 - 1) or lanes & (lanes - 1) or d4 % lanes or d4 // lanes > 2:
        return None
    gp = 1 << (g - 1).bit_length()
    return (lanes, d4 // lanes, gp) if gp <= lanes else None


def use_gqa(d: int, dv: int, g: int, subgroup_min: int, device: str = GPU, force: int | None = None,
            lanes: int = 0) -> bool:
    """Whether the decode kernel of these heads is the grouped-query one: ``force`` (attr ``decode_gqa``)
    1 / 0 decides where given (1 on heads it cannot take is an error), else the tuning class's ``gqa`` head
    dims and ``gqa_max_rows`` (padded rows a KV head) and a subgroup of at least L lanes (``subgroup_min``:
    the smallest the adapter may give)."""
    shape = gqa_shape(d, dv, g, lanes)
    if force is not None:
        if force and shape is None:
            raise ValueError(f"attention: decode_gqa=1 takes equal K and V head dims of a power of two vec4s, "
                             f"one or two a lane, and 2 .. L query heads per KV head, got D {d}, Dv {dv}, G "
                             f"{g}, lanes {lanes or 'default'}")
        return bool(force)
    tu = tuning(device).decode
    return shape is not None and d in tu.gqa and shape[2] <= tu.gqa_max_rows and subgroup_min >= shape[0]


def gqa_config(d: int, g: int, t: int, n_kv_head: int, n_ctx: int, n_split: int = 0, chunk: int = 0,
               device: str = GPU, spw: int = 0, lanes: int = 0):
    """The grouped-query kernel's launch shape as a ``DecodeConfig`` (R = GP rows, KS key slices of one team
    each, KB = L / GP keys a team pass, NCK = NCV columns a lane). A row block is one token's rows of a KV
    head (every plan: a row's splits depend on its position and n_ctx only); MAXS: up to
    ``gqa_wg_per_slot`` workgroups per slot over the KV heads, no more than splits of ``gqa_chunk_passes``
    workgroup passes fill n_ctx, at most ``max_splits``. ``n_split`` / ``chunk`` fix MAXS / the split
    minimum (tests). SPW as decode_config's."""
    from .attention import DecodeConfig, split_plan
    tn = tuning(device)
    tu = tn.decode
    shape = gqa_shape(d, d, g, lanes)
    if shape is None:
        raise ValueError(f"attention: no grouped-query decode kernel for D {d}, G {g}, lanes {lanes or 'default'}")
    lanes, nc, gp = shape
    kb = lanes // gp
    d4 = d // 4
    # key slices: teams up to gqa_lanes invocations, their states (KS x GP rows of D floats) and the query
    # rows in 16 KiB of workgroup memory
    ks = 1
    while 2 * ks * lanes <= tu.gqa_lanes and 2 * ks * gp * (16 * d4 + 8) + 16 * g * d4 <= 16384:
        ks *= 2
    blk = ks * kb
    c, maxs, spw = split_plan(blk, n_ctx, chunk or max(blk, tu.gqa_min_keys), tu.gqa_chunk_passes,
                              tu.gqa_wg_per_slot * tn.slots // n_kv_head, tu.max_splits, n_split, t, spw,
                              n_kv_head * t, tu.gqa_wg_per_slot * tn.slots)
    return DecodeConfig(R=gp, NRB=1, L=lanes, KS=ks, KB=kb, NCK=nc, NCV=nc, MAXS=maxs, CHUNK=c, SPW=spw)


def _tree(terms: list[str]) -> str:
    """terms summed as a balanced tree (short dependency chains)."""
    while len(terms) > 1:
        terms = [f"({terms[i]} + {terms[i + 1]})" if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
    return terms[0]


def gqa_code(lanes: int, g: int, gp: int, nc: int = 1) -> dict[str, str]:
    """The kernel's unrolled parts (see its header) for L = ``lanes``, G = ``g`` rows padded to ``gp``, ``nc``
    vec4 columns a lane (column tl, then tl + L)."""
    kb = lanes // gp
    ind = "      "
    cols = range(nc)
    qload = "\n".join(
        f"  let qb{r} = (t * NH + kvh * G + {r}u) * D4;\n"
        f"  let qi{r} = q_inv(lane, sgs, live, qb{r}, tl);\n" +
        "\n".join(f"  let q{r}_{c} = qs[{r}u * D4 + tl + {c * lanes}u] * (SCALE * qi{r});" for c in cols)
        for r in range(g))
    odecl = "\n".join(f"    var o{r}_{c} = vec4<f32>(0.0);" for r in range(g) for c in cols)
    fields = " ".join(f"k{i}_{c}: KRaw, v{i}_{c}: VRaw," for i in range(kb) for c in cols)
    loads = []
    for h in range(-(-kb // 8)):      # physical rows, eight keys a table lookup pair (common/paged_*.wgsl)
        loads.append(f"  let pj{h} = phys8(s, min(vec4<u32>(j0 + {8 * h}u) + vec4<u32>(0u, 1u, 2u, 3u), "
                     f"vec4<u32>(last)), min(vec4<u32>(j0 + {8 * h}u) + vec4<u32>(4u, 5u, 6u, 7u), vec4<u32>(last)));")
    comp = "xyzw"
    for i in range(kb):
        row = f"pj{i // 8}[{i % 8 // 4}].{comp[i % 4]}"
        for c in cols:
            loads.append(f"  p.k{i}_{c} = k_raw({row}, kvh, c + {c * lanes}u);\n"
                         f"  p.v{i}_{c} = v_raw({row}, kvh, c + {c * lanes}u);")
    scores = [f"{ind}let kk{i}_{c} = widen_k(c.k{i}_{c});" for i in range(kb) for c in cols]
    for r in range(gp):
        for i in range(kb):
            dots = " + ".join(f"dot(q{r}_{c}, kk{i}_{c})" for c in cols)
            scores.append(f"{ind}let x{r * kb + i} = " + (f"{dots};" if r < g else "0.0;"))
    # transposed butterfly over the pair index's bits, high to low: lane bit b keeps the half whose index
    # bit b is its own, and adds the other half from its partner, so lane i ends with pair i's total
    red, names, n = [], [f"x{i}" for i in range(lanes)], lanes
    for b in reversed(range(lanes.bit_length() - 1)):
        half, mask = n // 2, 1 << b
        red.append(f"{ind}let hb{b} = (tl & {mask}u) != 0u;")
        new = []
        for a in range(half):
            lo, hi = names[a], names[a + half]
            red.append(f"{ind}let y{b}_{a} = select({lo}, {hi}, hb{b}) + subgroupShuffleXor(select({hi}, {lo}, hb{b}), "
                       f"{mask}u);")
            new.append(f"y{b}_{a}")
        names, n = new, half
    red.append(f"{ind}let tot = {names[0]};")
    rowmax = "\n".join(f"{ind}mt = max(mt, subgroupShuffleXor(mt, {1 << b}u));" for b in range(kb.bit_length() - 1))
    pv = [f"{ind}let vv{i}_{c} = widen_v(c.v{i}_{c});" for i in range(kb) for c in cols]
    for r in range(g):
        pv.append(f"{ind}let a{r} = subgroupShuffle(alpha, tb + {r * kb}u);")
        pv += [f"{ind}let p{r}_{i} = subgroupShuffle(pr, tb + {r * kb + i}u);" for i in range(kb)]
        for c in cols:
            pv.append(f"{ind}o{r}_{c} = o{r}_{c} * a{r} + {_tree([f'p{r}_{i} * vv{i}_{c}' for i in range(kb)])};")
    rowsum = "\n".join(f"    ls += subgroupShuffleXor(ls, {1 << b}u);" for b in range(kb.bit_length() - 1))
    stash = "\n".join(f"    let m{r} = subgroupShuffle(m, tb + {r * kb}u);\n"
                       f"    let l{r} = subgroupShuffle(ls, tb + {r * kb}u);\n"
                       f"    if (tl == 0u) {{ tml[team * GP + {r}u] = vec2<f32>(m{r}, l{r}); }}\n" +
                       "\n".join(f"    tacc[(team * GP + {r}u) * DV4 + tl + {c * lanes}u] = o{r}_{c};" for c in cols)
                       for r in range(g))
    own = ["fn with_own(p: Pass, i0: u32) -> Pass {", "  var o = p;"]
    for i in range(kb):
        own.append(f"  if (i0 <= {i}u) {{ " + " ".join(f"o.k{i}_{c} = own.k{c}; o.v{i}_{c} = own.v{c};" for c in cols)
                   + " }")
    own += ["  return o;", "}"]
    return {"QLOAD": qload, "ODECL": odecl, "PASS_FIELDS": fields, "LOADS": "\n".join(loads),
            "WITH_OWN": "\n".join(own),
            "SCORES": "\n".join(scores), "REDUCE": "\n".join(red), "ROWMAX": rowmax, "PV": "\n".join(pv),
            "ROWSUM": rowsum, "STASH": stash}
