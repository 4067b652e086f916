"""Decode attention (shaders/attention_decode.wgsl): one dispatch, splits merged by the last workgroup.

The registered ``attention`` checks (run by test_kernel_ops.py and ``oxigpu kernels``) cover the shapes;
here: the same checks without subgroups (workgroup-memory team reductions), the split counts the cases
claim, and the cross-workgroup merge under replay: one plan at changing positions over many submits, N
copies of the dispatch in one pass (distinct queries and outputs, the same counters and partials), and
the counters back at zero after every run. References are float64; outputs start NaN-poisoned.

The same kernel with rope and the cache write fused in (``rope_kv_attention``; its registered checks run
in test_fuse.py): here without subgroups, with every cache row from the step's on NaN (none may be read),
and as a decode sequence whose steps read the rows the steps before wrote.
"""
from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import without_subgroups

from oxigpu.backends import numpy_ops
from oxigpu.backends.wgpu.device import Params
from oxigpu.backends.wgpu.kernel import CHECKS, case_error, load_kernels, prepare, rel_error, run_case, run_op
from oxigpu.backends.wgpu.ops._common import HALF_STEP, Batch, workgroups_for
from oxigpu.backends.wgpu.ops.attention import attention_case, decode_config, op_attrs, paged_attention_case
from oxigpu.backends.wgpu.ops.attention_gqa import gqa_config, gqa_shape, use_gqa
from oxigpu.backends.wgpu.ops.attention_mma import MmaTile, mma_tile
from oxigpu.backends.wgpu.ops.rope import reference as rope_reference
from oxigpu.backends.wgpu.ops.rope_attention import paged_rope_kv_attention_case, rope_kv_attention_case
from oxigpu.backends.wgpu.tuning import tuning

pytestmark = pytest.mark.gpu


def _ref(case, q, pos, n_tokens=1):
    """float64 attention of ``q`` at ``pos`` over the case's caches (numpy_ops on float64 inputs)."""
    _, ck, cv = case.inputs
    f = lambda a: np.asarray(a, np.float64)   # noqa: E731
    return numpy_ops.attention(f(q), f(ck), f(cv), **op_attrs(case.attrs), **numpy_ops.contiguous(pos, len(q), len(ck)),
                               n_tokens=n_tokens)


def _decode_cases():
    load_kernels()
    return [c for c in CHECKS["attention"]() if c.name.startswith("decode") or "decode kernel" in c.name]


def test_split_counts_of_the_cases():
    """The boundary cases really land where their names say."""
    cfg = decode_config(64, 64, 7, 1, 2, 520, n_split=8, chunk=64)
    assert [cfg.splits(n) for n in (63, 64, 65, 256, 257, 448)] == \
        [(64, 1), (64, 1), (64, 2), (64, 4), (64, 5), (64, 7)]
    cfg = decode_config(64, 64, 7, 1, 2, 1024, n_split=8, chunk=64)
    assert cfg.splits(1000) == (128, 8)
    cfg = decode_config(64, 64, 7, 1, 2, 4096)
    assert cfg.splits(4096)[1] == cfg.MAXS > 1 and cfg.CHUNK == cfg.blk      # splits as short as one pass
    assert cfg.splits(cfg.blk * 2 + 1) == (cfg.blk, 3) and cfg.MAXS * cfg.blk * 4 >= 4096 > cfg.MAXS * cfg.blk
    assert cfg.splits(cfg.CHUNK) == (cfg.CHUNK, 1) and cfg.splits(cfg.CHUNK + 1)[1] == 2
    cfg = decode_config(64, 64, 4, 1, 2, 960, n_split=16, chunk=64)
    assert cfg.splits(300)[1] == 5
    cfg = decode_config(128, 128, 1, 1, 2, 128, n_split=32)
    assert cfg.splits(100)[1] == -(-100 // cfg.blk) > 1 and cfg.KS > 1
    # rope_kv_attention's cases (n_keys = pos + 1)
    cfg = decode_config(64, 64, 7, 1, 2, 1024, n_split=8, chunk=64)
    assert [cfg.splits(n) for n in (63, 64, 65, 66, 256, 257, 448, 1000)] == \
        [(64, 1), (64, 1), (64, 2), (64, 2), (64, 4), (64, 5), (64, 7), (128, 8)]
    assert decode_config(128, 128, 16, 1, 1, 720).NRB == 8
    # the tuned long-context shape: Llama-1B (32/8 heads) at depth 4096 spreads over 2 workgroups per SM of
    # the H100's 132 (33 splits of 128 keys x 8 KV heads), not 27 of 160 (216, unevenly placed)
    cfg = decode_config(64, 64, 4, 1, 8, 4225)
    assert [cfg.splits(n) for n in (4097, 4161, 4224)] == [(128, 33)] * 3 and cfg.MAXS * 8 == 264
    assert decode_config(64, 64, 4, 1, 8, 4225, team_keys=4).blk == 16


def test_long_context_shape():
    """Caches of DecodeTuning.long_keys keys or more with 128-wide heads put a KV head's query rows in one
    workgroup with transposed sums; every plan of that n_ctx (one row, a batch, a verification) takes the
    same key slices, so a row's sums agree between them; shorter caches and other head widths keep theirs."""
    long = tuning("gpu").decode.long_keys
    short = decode_config(128, 128, 4, 1, 8, long - 1, per_token=True)
    assert (short.R, short.NRB, short.KS, short.TR) == (2, 2, 4, False)
    cfgs = [decode_config(128, 128, 4, t, 8, long, per_token=pt) for t, pt in ((1, True), (16, True), (6, False))]
    assert all(c.KS == 2 and c.TR for c in cfgs) and (cfgs[0].R, cfgs[0].NRB) == (4, 1)
    assert cfgs[0].splits(long) == cfgs[1].splits(long)
    for d, g in ((64, 4), (256, 4)):
        assert decode_config(d, d, g, 1, 8, long, per_token=True) == decode_config(d, d, g, 1, 8, long - 1,
                                                                                    per_token=True)


def test_grouped_query_kernel_choice():
    """The grouped-query decode kernel takes heads of a power of two vec4s with 2 .. D / 4 query heads per KV
    head (rows padded to a power of two), where the class's lane counts list the team and the adapter's
    narrowest subgroup spans it; decode_gqa=1 forces it (an error where the heads cannot take it), 0 keeps
    the per-row-team kernel. Its splits depend on n_ctx, never on the rows in the step."""
    assert gqa_shape(128, 128, 4) == (32, 1, 4) and gqa_shape(128, 128, 6) == (32, 1, 8)
    assert gqa_shape(64, 64, 7) == (16, 1, 8) and gqa_shape(256, 256, 4) == (32, 2, 4)   # two columns a lane
    assert gqa_shape(64, 64, 4, lanes=8) == (8, 2, 4) and gqa_shape(128, 128, 4, lanes=8) is None
    assert gqa_shape(128, 128, 1) is None and gqa_shape(96, 96, 3) is None and gqa_shape(96, 64, 3) is None
    assert gqa_shape(16, 16, 5) is None and gqa_shape(512, 512, 4) is None    # 8 rows > 4 lanes; 4 columns
    assert use_gqa(128, 128, 4, 32) and not use_gqa(128, 128, 4, 16) and not use_gqa(128, 128, 4, 0)
    assert use_gqa(64, 64, 4, 16) and not use_gqa(64, 64, 4, 8)          # 16-lane teams
    assert not use_gqa(128, 128, 6, 32) and not use_gqa(64, 64, 7, 32)   # 8 padded rows: gqa_max_rows
    assert use_gqa(128, 128, 6, 32, force=1)
    assert not use_gqa(256, 256, 4, 32)                                   # head dims not listed
    assert use_gqa(32, 32, 4, 4, force=1) and not use_gqa(128, 128, 4, 32, force=0)
    with pytest.raises(ValueError, match="decode_gqa=1"):
        use_gqa(128, 128, 1, 32, force=1)
    one = gqa_config(128, 4, 1, 8, 33024)
    assert (one.R, one.L, one.KS, one.KB, one.NCK) == (4, 32, 4, 8, 1)     # 128 invocations: KS teams
    assert one.MAXS == tuning("gpu").decode.gqa_wg_per_slot * tuning("gpu").slots // 8
    for t in (4, 16, 64):
        many = gqa_config(128, 4, t, 8, 33024)
        assert (many.MAXS, many.CHUNK, many.KS, many.KB) == (one.MAXS, one.CHUNK, one.KS, one.KB)
        assert [many.splits(n) for n in (1, 33, 4097, 32769)] == [one.splits(n) for n in (1, 33, 4097, 32769)]
    assert gqa_config(128, 6, 1, 2, 4096).R == 8 and gqa_config(64, 7, 1, 2, 4096).KB == 2
    two = gqa_config(64, 4, 1, 8, 4096, lanes=8)
    assert (two.L, two.NCK, two.NCV, two.KB) == (8, 2, 2, 2) and two.KS * two.L <= 128


@pytest.mark.parametrize("d,g", [(4, 3), (16, 5), (32, 2), (64, 7), (96, 3), (128, 16), (256, 8), (512, 4)])
def test_decode_config_shapes(d, g):
    """Teams cover the head in one or two columns a lane; at most 256 invocations a workgroup."""
    cfg = decode_config(d, d, g, 1, 1, 4096)
    assert cfg.NCK <= 2 and cfg.L * cfg.NCK >= d // 4 and cfg.wg <= 256 and cfg.R * cfg.NRB >= g


def _counters(dev, kernel):
    return dev.read(kernel.counters, np.uint32, kernel.counters.size // 4)


@pytest.mark.parametrize("subgroups", [True, False])
def test_replay_across_positions(dev, subgroups, monkeypatch):
    """One plan, many submits at changing positions (1 split, many, boundaries, back down): no partial
    or counter state leaks from one step into the next."""
    if not subgroups:
        without_subgroups(monkeypatch)
    case = attention_case("replay", 1, 1, 599, 14, 2, 64, 600, seed=9, n_split=8, split_chunk=64)
    p = prepare("attention", case.inputs, case.attrs, dev=dev)
    assert p.kernel.split == 8
    q = case.inputs[0]
    for pos in (599, 0, 63, 64, 300, 5, 511, 512, 127, 599, 1):
        dev.write_params(Params(pos=pos, n_tokens=1))
        dev.write(p.out_bufs[0], np.full(p.out_shapes[0], np.nan, np.float32))
        dev.submit(p.dispatches)
        got = dev.read(p.out_bufs[0], np.float32, p.out_shapes[0])
        assert rel_error(got, _ref(case, q, pos)) < 2e-5, pos
        assert not _counters(dev, p.kernel).any(), pos


@pytest.mark.parametrize("window", [0, 100])
def test_grid_sized_to_the_active_splits(dev, window):
    """The GPU-resident decode launches only the workgroups a step's active splits need
    (Attention.decode_groups; with T == 1 the shader gives consecutive workgroups a row block's active
    splits): at changing positions (one split, several, split boundaries, a window), that grid gives the
    whole grid's output and leaves no counter set."""
    case = attention_case("sized", 1, 1, 599, 14, 2, 64, 600, window=window, seed=9, n_split=8, split_chunk=64)
    p = prepare("attention", case.inputs, case.attrs, dev=dev)
    kern, q = p.kernel, case.inputs[0]
    sizes = []
    for pos in (599, 0, 63, 64, 300, 5, 511, 512, 127, 599, 1):
        n = kern.decode_groups(pos)
        sizes.append(n)
        sized = [d._replace(workgroups=workgroups_for(n)) for d in p.dispatches]
        dev.write_params(Params(pos=pos, n_tokens=1))
        dev.write(p.out_bufs[0], np.full(p.out_shapes[0], np.nan, np.float32))
        dev.submit(sized)
        got = dev.read(p.out_bufs[0], np.float32, p.out_shapes[0])
        assert rel_error(got, _ref(case, q, pos)) < 2e-5, pos
        assert not _counters(dev, kern).any(), pos
    n_blocks = kern.n_groups // kern.split
    assert min(sizes) == n_blocks and max(sizes) == (2 * n_blocks if window else kern.n_groups)


@pytest.mark.parametrize("pos", [40, 333])
def test_copies_in_one_pass(dev, pos):
    """N copies of the dispatch in ONE pass, sharing counters and partials but each with its own query
    and output: every copy must find the counters reset by the one before and merge only its own splits
    (a stuck counter leaves a poisoned output, a leaked partial a wrong one)."""
    case = attention_case("copies", 1, 1, 335, 8, 2, 64, 336, seed=4, n_split=6, split_chunk=64)
    p = prepare("attention", case.inputs, case.attrs, dev=dev)
    kern, (_, ck, cv) = p.kernel, p.in_bufs
    g = np.random.default_rng(1)
    qs = [g.standard_normal(case.inputs[0].shape).astype(np.float32) for _ in range(12)]
    outs = [dev.upload(np.full(p.out_shapes[0], np.nan, np.float32)) for _ in qs]
    ds = []
    for qh, out in zip(qs, outs):
        ds += kern.encode([dev.upload(qh), ck, cv, out])
    dev.write_params(Params(pos=pos, n_tokens=1))
    dev.submit(ds)
    for i, (qh, out) in enumerate(zip(qs, outs)):
        got = dev.read(out, np.float32, p.out_shapes[0])
        assert rel_error(got, _ref(case, qh, pos)) < 2e-5, i
    assert not _counters(dev, kern).any()


def test_a_stuck_counter_is_caught(dev):
    """The replay checks can fail: a counter left non-zero makes a step merge early or never. Here it is
    left where a run's workgroups take it without the reset (at n_split), so none of them merges. (An
    early merge can still find every partial written on a fast GPU, where the last split runs alongside.)"""
    case = attention_case("stuck", 1, 1, 300, 8, 2, 64, 320, seed=3, n_split=6, split_chunk=64)
    p = prepare("attention", case.inputs, case.attrs, dev=dev)
    dev.write(p.kernel.counters, np.array([6, 0], np.uint32))
    dev.write_params(Params(pos=300, n_tokens=1))
    dev.submit(p.dispatches)
    got = dev.read(p.out_bufs[0], np.float32, p.out_shapes[0])
    want = _ref(case, case.inputs[0], 300)
    assert not rel_error(got[:, :4 * 64], want[:, :4 * 64]) < 2e-5     # KV head 0: broken
    assert rel_error(got[:, 4 * 64:], want[:, 4 * 64:]) < 2e-5         # KV head 1: fine


def _without_gqa(attrs: dict) -> dict:
    """A case's attrs without decode_gqa (devices without subgroups have no grouped-query kernel)."""
    return {k: v for k, v in attrs.items() if k != "decode_gqa"}


def _rope_cases():
    load_kernels()
    return list(CHECKS["rope_kv_attention"]())


@pytest.mark.parametrize("case", _rope_cases(), ids=lambda c: c.name)
def test_rope_kv_attention_without_subgroups(dev, case, monkeypatch):
    """(The grouped-query kernel needs subgroups: its cases run the per-row-team kernel here.)"""
    without_subgroups(monkeypatch)
    got = run_op(case.op, case.inputs, _without_gqa(case.attrs), case.pos, case.n_tokens, case.in_types, dev)
    err, tol = case_error(case, got, case.reference())
    assert err <= tol, f"{case.name}: rel. error {err:.3g}"


@pytest.mark.parametrize("case", [c for c in _rope_cases() if any(w in c.name for w in (
    "pos=0 ", "alone in split 1", "gemma3", "row blocks", "neox rot=12"))], ids=lambda c: c.name)
def test_rope_kv_attention_reads_no_row_from_the_step_on(dev, case):
    """Cache rows pos .. n_ctx-1 all NaN: the output is still right, row pos gets rope(k) and v (as f16),
    the rows after it stay NaN and the rows before it untouched."""
    pos, (q, k, v, ck, cv, *ff) = case.pos, case.inputs
    ck, cv = ck.copy(), cv.copy()
    ck[pos:] = cv[pos:] = np.nan
    out, got_k, got_v = run_op(case.op, [q, k, v, ck, cv, *ff], case.attrs, pos, 1, case.in_types, dev)
    want_out, want_k, want_v = case.reference()
    tol_out, tol_k, tol_v = case.tol
    assert rel_error(out, want_out) <= tol_out
    for got, want, before, tol in ((got_k, want_k, ck, tol_k), (got_v, want_v, cv, tol_v)):
        assert np.array_equal(got[:pos], before[:pos]) and np.isnan(got[pos + 1:]).all()
        assert rel_error(got[pos], want[pos]) <= tol


@pytest.mark.parametrize("subgroups", [True, False])
def test_rope_kv_attention_decode_sequence(dev, subgroups, monkeypatch):
    """Steps at positions 0 .. 69 on one kernel and one pair of caches (GQA over two row blocks, splits
    of 16 keys): each step attends over the rows the steps before it wrote; every output and the caches
    against float64 (rope of each step's q and k, rounded to f16 in the caches, attention over the rows so
    far). Each step's key row is checked against the reference's f16 rounding, and the attention reference
    attends over the rows as the GPU rounded them: a roped key at an f16 rounding tie may round either way
    (its sin / cos are not the reference's), which moves the output by more than attention's own error."""
    if not subgroups:
        without_subgroups(monkeypatch)
    H, Hkv, D, n_ctx, n = 16, 2, 64, 80, 70
    case = rope_kv_attention_case("sequence", 0, H, Hkv, D, n_ctx, neox=False, n_split=8, split_chunk=16,
                                  decode_gqa=0)
    a = case.attrs
    p = prepare(case.op, case.inputs, a, case.in_types, dev)
    assert p.kernel.cfg.NRB == 2
    g = np.random.default_rng(3)
    ra = dict(head_dim=D, n_rot=D, base=a["base"], neox=False, freq_scale=1.0)
    ck, cv = np.zeros((n_ctx, Hkv * D)), np.zeros((n_ctx, Hkv * D))
    for pos in range(n):
        q, k, v = (g.standard_normal(x.shape).astype(np.float32) for x in case.inputs[:3])
        for buf, x in zip(p.in_bufs, (q, k, v)):
            dev.write(buf, x)
        dev.write_params(Params(pos=pos, n_tokens=1))
        # odd steps launch only the active splits' workgroups, as the GPU-resident decode does
        n = p.kernel.decode_groups(pos) if pos % 2 else p.kernel.n_groups
        dev.submit([d._replace(workgroups=workgroups_for(n)) for d in p.dispatches])
        ck[pos] = dev.read(p.in_bufs[3], np.float16, ck.shape)[pos]
        assert rel_error(ck[pos], rope_reference(k, Hkv, **ra, pos=pos)[0].astype(np.float16)) <= HALF_STEP, pos
        cv[pos] = v[0].astype(np.float16)
        want = numpy_ops.attention(rope_reference(q, H, **ra, pos=pos), ck, cv, n_head=H, n_head_kv=Hkv,
                                   head_dim=D, v_head_dim=D, scale=a["scale"], **numpy_ops.contiguous(pos, 1, len(ck)),
                                   n_tokens=1)
        got = dev.read(p.out_bufs[0], np.float32, p.out_shapes[0])
        assert rel_error(got, want) < 2e-5, pos
        assert not _counters(dev, p.kernel).any(), pos
    assert rel_error(dev.read(p.in_bufs[3], np.float16, ck.shape)[:n], ck[:n]) == 0     # no row written twice
    assert rel_error(dev.read(p.in_bufs[4], np.float16, cv.shape)[:n], cv[:n]) == 0


def _prefill_cases():
    load_kernels()
    return [c for c in CHECKS["attention"]() if c.name.startswith("prefill") and "decode kernel" not in c.name
            and "split" not in c.name]


@pytest.mark.parametrize("case", _decode_cases() + _prefill_cases(), ids=lambda c: c.name)
def test_without_subgroups(dev, case, monkeypatch):
    """The decode kernel's and the flash prefill kernel's workgroup-memory reductions (REDUCE = wg; the
    grouped-query kernel's cases on the per-row-team kernel)."""
    without_subgroups(monkeypatch)
    got = run_op("attention", case.inputs, _without_gqa(case.attrs), case.pos, case.n_tokens, dev=dev)
    err = rel_error(got[0], case.reference()[0])
    assert err <= case.tol, f"{case.name}: rel. error {err:.3g}"


def test_prefill_replay_across_positions(dev):
    """One prefill plan replayed over chunks at growing positions with fewer live rows (as a prompt's
    chunks run): nothing of one run leaks into the next."""
    case = attention_case("prefill replay", 64, 64, 236, 14, 2, 64, 300, seed=12)   # every cache row finite
    p = prepare("attention", case.inputs, case.attrs, dev=dev)
    assert p.kernel.prefill
    q = case.inputs[0]
    for pos, n in ((0, 64), (64, 64), (128, 40), (200, 1), (201, 64), (0, 3)):
        dev.write_params(Params(pos=pos, n_tokens=n))
        dev.write(p.out_bufs[0], np.full(p.out_shapes[0], np.nan, np.float32))
        dev.submit(p.dispatches)
        got = dev.read(p.out_bufs[0], np.float32, p.out_shapes[0])
        assert rel_error(got, _ref(case, q, pos, n)) < 2e-5, (pos, n)


MMA_TOL = 2e-3
"""The matrix-unit kernel rounds q * scale and P to f16 (the caches already are): ~4e-4 of max |ref| seen."""


def _mma_cases():
    cases = [
        attention_case("mma D=64 GQA7 T=150 n_tokens=141 pos=93 (ragged rows, several tiles)", 150, 141, 93, 14, 2,
                       64, 240, seed=70, prefill_mma=True),
        attention_case("mma D=128 GQA4 T=70 n_tokens=66 pos=5", 70, 66, 5, 8, 2, 128, 80, seed=71, prefill_mma=True),
        attention_case("mma D=128 GQA4 T=512 pos=512 tile 4:32", 512, 512, 512, 8, 2, 128, 1024, seed=72,
                       prefill_mma="4:32"),
        attention_case("mma D=64 GQA1 T=65 pos=31 window=40 softcap", 65, 65, 31, 2, 2, 64, 96, window=40,
                       softcap=10.0, seed=73, prefill_mma=True),
        attention_case("mma D=64 GQA4 T=33 pos=1 window=1 (each row sees itself)", 33, 33, 1, 4, 1, 64, 34, window=1,
                       seed=74, prefill_mma=True),
        attention_case("mma D=96 Dv=64 GQA3 T=20 n_tokens=19 pos=9", 20, 19, 9, 6, 2, 96, 28, dv=64, seed=75,
                       prefill_mma=True),
        attention_case("mma D=16 GQA2 T=24 pos=4", 24, 24, 4, 4, 2, 16, 28, seed=76, prefill_mma=True),
        attention_case("mma D=64 GQA7 T=16 n_tokens=1 (one live row)", 16, 1, 0, 7, 1, 64, 16, seed=77,
                       prefill_mma=True),
        attention_case("mma rescale D=64 GQA4 T=200 pos=40 (keys grow along the cache)", 200, 200, 40, 8, 2, 64, 256,
                       seed=78, prefill_mma=True),
        attention_case("mma rescale D=128 T=130 pos=17 window=70 softcap", 130, 130, 17, 4, 4, 128, 160, window=70,
                       softcap=20.0, seed=79, prefill_mma="4:32"),
        # key units (one workgroup per row block and unit of keys, merged after): units that start inside a
        # tile, rows that see none of a unit's keys, windows leaving whole units empty, moved maxima
        attention_case("mma units of 48 D=64 GQA7 T=150 n_tokens=141 pos=93", 150, 141, 93, 14, 2, 64, 240,
                       seed=80, prefill_mma=True, prefill_units=48),
        attention_case("mma units of 64 D=128 GQA4 T=70 pos=300 window=100 softcap", 70, 70, 300, 8, 2, 128, 400,
                       window=100, softcap=20.0, seed=81, prefill_mma="4:32", prefill_units=64),
        attention_case("mma rescale units of 96 D=64 GQA4 T=200 pos=40", 200, 200, 40, 8, 2, 64, 256, seed=82,
                       prefill_mma=True, prefill_units=96),
        attention_case("mma units from the keys D=64 GQA7 T=150 n_tokens=141 pos=93", 150, 141, 93, 14, 2, 64, 240,
                       seed=83, prefill_mma=True, prefill_units=-1),
        # K and V staged a word per lane (tile option "w")
        attention_case("mma words D=128 GQA4 T=130 pos=17 window=70 softcap", 130, 130, 17, 8, 2, 128, 160,
                       window=70, softcap=20.0, seed=84, prefill_mma="4:32w"),
        attention_case("mma words D=64 GQA7 T=150 n_tokens=141 pos=93 units of 64", 150, 141, 93, 14, 2, 64, 240,
                       seed=85, prefill_mma="4:64w", prefill_units=64),
    ]
    for c in cases:
        if "rescale" in c.name:   # keys grow 5x along the cache: later tiles' maxima exceed the first's by > 8
            ck = c.inputs[1]
            ck *= (1.0 + 4.0 * np.arange(len(ck)) / len(ck)).astype(np.float16)[:, None]
    return cases


@pytest.mark.parametrize("case", _mma_cases(), ids=lambda c: c.name)
def test_prefill_mma(dev, case):
    """shaders/attention_mma.wgsl (the matrix units; Dawn on NVIDIA) against float64, NaN past the written
    cache rows; the rescale cases move rows' reference maxima after the first tile."""
    if not dev.has_mma:
        pytest.skip("no subgroup matrices (the matrix-unit prefill attention runs on Dawn with them only)")
    kernel = prepare("attention", case.inputs, case.attrs, dev=dev).kernel
    assert isinstance(kernel.cfg, MmaTile) and (kernel.units > 1) == ("units" in case.name)
    got = run_op("attention", case.inputs, case.attrs, case.pos, case.n_tokens, dev=dev)
    err = rel_error(got[0], case.reference()[0])
    assert err <= MMA_TOL, f"{case.name}: rel. error {err:.3g}"


def test_mma_tile_choice():
    """Head dims the matrix-unit kernel takes, and the tile that fits the workgroup memory."""
    assert mma_tile(64, 64, 49152) == MmaTile(4, 32) and mma_tile(128, 128, 49152) == MmaTile(4, 32)
    assert mma_tile(128, 128, 49152, "4:64") == MmaTile(4, 64) and mma_tile(128, 128, 16384) is None
    assert mma_tile(64, 64, 49152, "4:32w") == MmaTile(4, 32, True) and not mma_tile(64, 64, 49152).W
    assert mma_tile(256, 256, 1 << 20) is None and mma_tile(72, 64, 49152) is None and mma_tile(96, 64, 49152)
    assert all(MmaTile(4, bk).shared_bytes(128, 128) <= 49152 for bk in (32, 64))
    with pytest.raises(ValueError, match="does not fit"):
        mma_tile(128, 128, 16384, "4:64")


@pytest.mark.parametrize("d,dv,limit", [(64, 64, 49152), (128, 128, 49152), (256, 256, 49152), (64, 64, 32768),
                                        (128, 128, 32768), (256, 256, 32768), (64, 64, 16384), (96, 64, 32768)])
def test_prefill_tile_fits(d, dv, limit):
    """The chosen tile fits the workgroup memory and its register estimate; only D = 256 in 16 KiB has none."""
    from oxigpu.backends.wgpu.ops.attention_prefill import prefill_config
    from oxigpu.backends.wgpu.tuning import tuning
    cfg = prefill_config(d, dv, limit)
    if d == 256 and limit == 16384:
        assert cfg is None
        return
    assert cfg.smem_bytes() <= limit and cfg.registers() <= tuning().prefill.reg_budget
    assert cfg.CV * cfg.NKL == dv // 4 and cfg.BK % 4 == 0


# Rows of several sequences (the batching contract): the paged kernels' registered checks run in
# test_kernel_ops; here the matrix-unit prefill on them, their subgroup-free reductions, and a row's
# result in a batch against the same row alone.

def _paged_cases():
    load_kernels()
    return list(CHECKS["attention.paged"]())


@pytest.mark.parametrize("case", _paged_cases(), ids=lambda c: c.name)
def test_paged_prefill_mma(dev, case):
    """attention_mma.wgsl over the tiles of rows of several sequences (Dawn on NVIDIA only)."""
    if not dev.has_mma:
        pytest.skip("no subgroup matrices (the matrix-unit prefill attention runs on Dawn with them only)")
    if "n_split" in case.attrs or case.attrs["head_dim"] > 128 or case.attrs["head_dim"] % 16:
        pytest.skip("the decode kernel's case, or head dims the matrix-unit kernel does not take")
    attrs = {**{k: v for k, v in case.attrs.items() if k != "prefill_tile"}, "prefill_mma": True}
    assert isinstance(prepare("attention", case.inputs, attrs, case.in_types, dev=dev).kernel.cfg, MmaTile)
    got = run_op("attention", case.inputs, attrs, n_tokens=case.n_tokens, in_types=case.in_types, dev=dev,
                 n_seqs=case.n_seqs)
    err = rel_error(got[0], case.reference()[0])
    assert err <= MMA_TOL, f"{case.name}: rel. error {err:.3g}"


@pytest.mark.parametrize("case", _paged_cases()[:2] + _paged_cases()[5:9], ids=lambda c: c.name)
def test_paged_without_subgroups(dev, case, monkeypatch):
    without_subgroups(monkeypatch)
    got = run_case(case, dev)
    err = rel_error(got[0], case.reference()[0])
    assert err <= case.tol, f"{case.name}: rel. error {err:.3g}"


def _paged_ref_rows(q, ck, cv, b, att):
    from oxigpu.backends.wgpu.ops.attention import paged_reference
    return paged_reference(q, ck, cv, b, **op_attrs(att))


@pytest.mark.parametrize("d,gqa", [(64, None), (32, None), (32, 1)])
def test_a_row_in_a_batch_equals_the_row_alone(dev, d, gqa):
    """Decode rows of four sequences in one step, through the decode kernel (rope_kv_attention; attention
    with n_split): each row's output, and the cache row it writes, are bit for bit those of a step of its
    own (its splits depend on its keys only; a batch's team sums take the transposed form, a one-row step's
    the plain butterfly, which sum in the same pairs: D = 32's 8-lane teams fit lavapipe's subgroups too)."""
    b = Batch([(0, 700, 1), (1, 31, 1), (2, 5, 1), (3, 1500, 1)], 4, 64, 400, seed=3)
    extra = {} if gqa is None else {"decode_gqa": gqa}
    for case in (paged_attention_case("batch", b, 8, 2, d, seed=5, n_split=8, split_chunk=64, **extra),
                 paged_rope_kv_attention_case("batch", b, 8, 2, d, seed=6, **extra)):
        got = run_case(case, dev)
        x = case.inputs[:3] if case.op == "rope_kv_attention" else case.inputs[:1]
        caches = case.inputs[len(x):len(x) + 2]
        for t in range(4):
            one = Batch([(int(b.row_seq[t]), int(b.positions[t]), 1)], 4, 64, 400, seed=3)   # the same table
            alone = run_op(case.op, [a[t:t + 1] for a in x] + list(caches) + one.inputs(), case.attrs, n_tokens=1,
                           in_types=case.in_types, dev=dev)
            assert np.array_equal(got[0][t:t + 1], alone[0]), (case.op, t)
            if case.op == "rope_kv_attention":   # the row's own key and value, as written
                r = b.phys(int(b.row_seq[t]), int(b.positions[t]))
                assert np.array_equal(got[1][r], alone[1][r]) and np.array_equal(got[2][r], alone[2][r])


@pytest.mark.parametrize("d,gqa", [(64, None), (32, 1)])
def test_splits_per_workgroup_change_no_bit(dev, d, gqa):
    """A batch's step with several splits per workgroup (split_group; tuning.py spw_fill chooses it for large
    batches) gives every row, and every cache row written, bit for bit as one split per workgroup does, for
    groups that divide the splits evenly or not, and within tolerance of float64 (both decode kernels)."""
    b = Batch([(0, 700, 1), (1, 31, 1), (2, 5, 1), (3, 1500, 1), (4, 257, 1)], 5, 64, 400, seed=7)
    extra = {} if gqa is None else {"decode_gqa": gqa}
    for case in (paged_attention_case("groups", b, 8, 2, d, seed=8, n_split=8, split_chunk=32, **extra),
                 paged_rope_kv_attention_case("groups", b, 8, 2, d, seed=9, n_split=8, split_chunk=32, **extra)):
        one = run_case(case, dev)
        err, bound = case_error(case, one, case.reference())
        assert err <= bound, f"{case.op}: rel. error {err:.3g}"
        for spw in (2, 3, 8):
            attrs = {**case.attrs, "split_group": spw}
            assert prepare(case.op, case.inputs, attrs, case.in_types, dev=dev).kernel.cfg.SPW == spw
            got = run_op(case.op, case.inputs, attrs, n_tokens=case.n_tokens, in_types=case.in_types, dev=dev,
                         n_seqs=case.n_seqs)
            for a, w in zip(got, one):
                assert np.array_equal(a, w), (case.op, spw)


def test_splits_per_workgroup_rule():
    """Many rows' blocks take several splits a workgroup while no fewer than spw_fill workgroups per slot are
    left (evened out); a one-row step never does (its host launches the active splits only)."""
    cls = "mma"
    fill = tuning(cls).decode.spw_fill * tuning(cls).slots
    assert decode_config(128, 128, 4, 1, 8, 640, device=cls, per_token=True).SPW == 1
    for d, t in ((128, 64), (128, 16), (64, 16), (64, 4), (128, 2)):
        c = decode_config(d, d, 4, t, 8, 640, device=cls, per_token=True)
        groups = 8 * c.NRB * t * -(-c.MAXS // c.SPW)
        assert c.MAXS == 5 and 1 <= c.SPW <= 5 and (groups >= fill or c.SPW == 1), (d, t, c)
        if c.SPW < c.MAXS:      # one more split a workgroup would leave fewer than `fill` workgroups
            assert 8 * c.NRB * t * -(-c.MAXS // (c.SPW + 1)) < fill or -(-c.MAXS // (c.SPW + 1)) == -(-c.MAXS // c.SPW)
    assert decode_config(128, 128, 4, 64, 8, 640, device=cls, per_token=True).SPW == 5
    assert decode_config(128, 128, 4, 16, 8, 640, device=cls, per_token=True, spw=2).SPW == 2


@pytest.mark.parametrize("mma", [False, True])
def test_one_sequence_on_a_plan_of_several_slots(dev, mma):
    """A step of one sequence on a plan whose block table has three slots: the prefill kernels take fixed row
    blocks (n_seqs 1: no tile search at run time), a plan of one slot has no tile search at all, and the tile
    search (n_seqs 3: slots 1 and 2 hold no rows) gives the same rows; all against float64."""
    if mma and not dev.has_mma:
        pytest.skip("no subgroup matrices (the matrix-unit prefill attention runs on Dawn with them only)")
    b = Batch([(0, 45, 70)], 3, 8, 40, pad=5, seed=13)
    case = paged_attention_case("one of three slots", b, 14, 2, 64, window=60, seed=14, prefill_mma=mma)
    want = case.reference()[0]
    one = Batch([(0, 45, 70)], 1, 8, 40, pad=5, seed=13)
    assert np.array_equal(one.block_table[0], b.block_table[0])
    one_slot = case.inputs[:5] + [one.block_table]
    outs = {}
    for name, inputs, n_seqs in (("runtime", case.inputs, 1), ("tiles", case.inputs, 3), ("one slot", one_slot, 1)):
        p = prepare("attention", inputs, case.attrs, case.in_types, dev=dev)
        assert p.kernel.prefill and p.kernel.tiles == (name != "one slot")
        outs[name] = run_op("attention", inputs, case.attrs, n_tokens=b.n_tokens, in_types=case.in_types, dev=dev,
                            n_seqs=n_seqs)[0]
        err = rel_error(outs[name], want)
        assert err <= (MMA_TOL if mma else case.tol), f"{name}: rel. error {err:.3g}"


@pytest.mark.parametrize("D,H,Hkv,p0,gqa", [(64, 8, 2, 70, 0), (128, 8, 2, 31, 0), (64, 14, 2, 200, 0),
                                             (32, 8, 2, 70, 1), (32, 14, 2, 200, 1), (16, 8, 2, 31, 1),
                                             (64, 8, 2, 150, 8), (32, 8, 2, 62, "barrier"),
                                             (32, 14, 2, 200, "barrier"), (64, 32, 8, 300, 1),
                                             (128, 32, 8, 300, 1), (128, 12, 2, 95, 1), (128, 12, 2, 95, "barrier")])
def test_one_row_step_equals_the_verification_rows(dev, D, H, Hkv, p0, gqa):
    """A one-row decode step (rope_kv_attention: rope, the cache write and the attention in one kernel) and
    a speculative verification's rows of the same sequence (rope_kv_store, then the decode kernel reading
    every key from the cache) give a row's output and its cache rows bit for bit: the step's own key is
    summed where the cache path sums it, so greedy speculative decoding can equal plain decoding. Both the
    per-row-team kernel and the grouped-query one (``gqa``: the own key from registers; 8: teams of 8 lanes,
    two columns a lane; "barrier": the own key written, then read back, gqa_own_reg=0). Teams of D / 4 lanes
    need subgroups that wide: teams of up to 8 lanes run on lavapipe (its subgroups are 8 wide, though it
    reports 4 as its narrowest), the 64- and 128-wide heads' own teams on GPUs (NVIDIA: 32)."""
    team = gqa if isinstance(gqa, int) and gqa > 1 else 0          # team_lanes (0: the kernel's own width)
    lanes = gqa_shape(D, D, H // Hkv, team)[0] if gqa else 0
    if lanes > 8 and dev.subgroup_min_size < lanes:
        pytest.skip(f"teams of {lanes} lanes need subgroups that wide (this adapter: "
                    f"{dev.subgroup_min_size or 'unknown'})")
    g = np.random.default_rng(D + p0)
    T = 3                                            # the verification's rows: positions p0 .. p0 + 2
    ver_b = Batch([(0, p0, T)], 1, 10, 10, seed=1)
    one_b = Batch([(0, p0 + T - 1, 1)], 1, 10, 10, seed=1)     # the same block table (same seed)
    ck = (g.standard_normal((ver_b.rows, Hkv * D)) * 2).astype(np.float16)
    cv = g.standard_normal((ver_b.rows, Hkv * D)).astype(np.float16)
    q = g.standard_normal((T, H * D)).astype(np.float32)
    k = g.standard_normal((T, Hkv * D)).astype(np.float32)
    v = g.standard_normal((T, Hkv * D)).astype(np.float32)
    rope = dict(n_head=H, n_head_kv=Hkv, head_dim=D, n_rot=D, base=1e4, neox=True, freq_scale=1.0, block_size=32)
    att = dict(n_head=H, n_head_kv=Hkv, head_dim=D, v_head_dim=D, scale=D ** -0.5, block_size=32,
               decode_gqa=int(bool(gqa)), **({"team_lanes": team} if team else {}),
               **({"gqa_own_reg": 0} if gqa == "barrier" else {}))
    types = ["f32"] * 3 + ["f16"] * 2 + ["i32"] * 3
    qr, ck2, cv2 = run_op("rope_kv_store", [q, k, v, ck, cv, *ver_b.inputs()], rope, n_tokens=T, in_types=types,
                          dev=dev)
    ver = run_op("attention", [qr, ck2, cv2, *ver_b.inputs()], att, n_tokens=T, in_types=types[2:], dev=dev)[0]
    last = one_b.phys(0, p0 + T - 1)
    ck3, cv3 = ck2.copy(), cv2.copy()
    ck3[last] = cv3[last] = np.nan                   # the one-row step writes this row itself
    one, ck4, cv4 = run_op("rope_kv_attention", [q[-1:], k[-1:], v[-1:], ck3, cv3, *one_b.inputs()], rope | att,
                           n_tokens=1, in_types=types, dev=dev)
    assert np.array_equal(ck4, ck2) and np.array_equal(cv4, cv2)
    assert np.array_equal(one[0], ver[-1]), f"max difference {np.abs(one[0] - ver[-1]).max():.3g}"
    for p in (prepare("attention", [qr, ck2, cv2, *ver_b.inputs()], att, types[2:], dev=dev),
              prepare("rope_kv_attention", [q[-1:], k[-1:], v[-1:], ck3, cv3, *one_b.inputs()], rope | att, types,
                      dev=dev)):
        assert p.kernel.gqa == bool(gqa) and not p.kernel.prefill
    assert rel_error(one[0], _paged_ref_rows(qr[-1:], ck2, cv2, one_b, att)) < 2e-5
