"""The sampler: numpy semantics (llama.cpp's chain order and rules, ties, penalties, every filter, mirostat,
DRY, the RNG) and the device sampler drawing the same tokens as numpy -- every sampler over 1,000 seeded
draws on synthetic logits, batched slots with their own settings, masks and logprobs."""
from __future__ import annotations

import math

import numpy as np
import pytest

from oxigpu.runtime import sampling
from oxigpu.runtime.sampling import DryConfig, SamplerConfig, draw, sample, uniform


def test_rng_is_fixed_and_uniform():
    # golden values: changing the RNG changes every seeded generation, on every backend
    assert [sampling.pcg_hash(x) for x in (0, 1, 2**32 - 1)] == [129708002, 2831084092, 3861530882]
    assert uniform(0, 0) == (sampling.pcg_hash(sampling.pcg_hash(0)) >> 8) / 2**24
    u = np.array([uniform(1234, c) for c in range(20000)])
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.03
    assert uniform(1, 5) != uniform(2, 5)
    assert sampling.fold_seed(2**40 + 7) == (7 ^ 2**8)


def test_greedy_takes_lowest_id_on_ties_and_skips_nan():
    logits = np.array([1.0, 3.0, 2.0, 3.0, -1.0], np.float32)
    assert sample(logits, SamplerConfig(temperature=0.0)) == 1
    assert sample(logits, SamplerConfig(temperature=0.0, logit_bias={1: -1.0})) == 3
    logits[1] = np.nan
    assert sample(logits, SamplerConfig(temperature=0.0)) == 3


def test_penalties_follow_llama_cpp():
    logits = np.array([2.0, -2.0, 1.0, 0.5], np.float32)
    cfg = SamplerConfig(repeat_penalty=2.0, frequency_penalty=0.25, presence_penalty=0.5, penalty_last_n=3)
    got = sampling.apply_bias_and_penalties(logits, cfg, recent=[2, 0, 1, 1, 0])   # window: 1, 1, 0
    # token 0 (once): 2/2 - 0.25 - 0.5; token 1 (twice): -2*2 - 0.5 - 0.5; 2 is outside the window
    np.testing.assert_array_equal(got, np.array([0.25, -5.0, 1.0, 0.5], np.float32))


def _probs(l: np.ndarray, temp: float) -> np.ndarray:
    e = np.exp((l - l.max()) / temp)
    return e / e.sum()


def _freq_matches(l, cfg, keep, n=3000, tol=0.035):
    """Draws over many counters land exactly on the ids ``keep`` with the temperature-scaled softmax."""
    draws = np.array([sample(l, cfg, counter=c) for c in range(n)])
    assert set(np.unique(draws).tolist()) == set(keep), (cfg, sorted(set(draws.tolist())), keep)
    want = _probs(l[keep].astype(np.float64), cfg.temperature)
    freq = np.array([np.mean(draws == k) for k in keep])
    assert np.abs(freq - want).max() < tol, (cfg, freq, want)


def test_filters_keep_the_documented_sets():
    g = np.random.default_rng(0)
    l = np.sort(g.standard_normal(50).astype(np.float32))[::-1].copy()   # id order = rank order
    p1 = _probs(l.astype(np.float64), 1.0)
    n_p = int(np.argmax(np.cumsum(p1) >= 0.6)) + 1                       # top-p at temperature 1
    n_m = int(np.sum(p1 / p1[0] >= 0.2))                                 # min-p: p >= 0.2 p_max
    n_p8 = int(np.argmax(np.cumsum(p1[:8] / p1[:8].sum()) >= 0.6)) + 1   # top-p renormalizes after top-k
    sd = l.astype(np.float64).std()
    n_s = int(np.sum(l >= l[0] - 1.0 * sd))                              # top-n-sigma, n = 1
    for cfg, n_keep in [(SamplerConfig(temperature=1.5, top_k=5), 5),
                        (SamplerConfig(temperature=0.7, top_p=0.6), n_p),
                        (SamplerConfig(temperature=2.0, min_p=0.2), n_m),
                        (SamplerConfig(temperature=1.0, top_k=8, top_p=0.6, min_p=0.2), min(n_p8, n_m)),
                        (SamplerConfig(temperature=1.0, top_n_sigma=1.0), n_s)]:
        _freq_matches(l, cfg, list(range(n_keep)))


def test_typical_p_keeps_the_locally_typical_set():
    """llama.cpp's typical sampling: candidates ordered by |-log p - H|, the shortest such prefix with
    mass > p kept (here it drops the most likely token, which is far from typical)."""
    l = np.array([2.5] + [1.0] * 10 + [-3.0], np.float32)
    p = _probs(l.astype(np.float64), 1.0)
    h = -(p * np.log(p)).sum()
    order = np.argsort(np.abs(-np.log(p) - h), kind="stable")
    last = int(np.argmax(np.cumsum(p[order]) > 0.5)) + 1
    keep = sorted(order[:last].tolist())
    assert 0 not in keep
    _freq_matches(l, SamplerConfig(temperature=1.0, typical_p=0.5), keep)
    # at temperature 0 the best remaining token wins, as in llama.cpp
    assert sample(l, SamplerConfig(temperature=0.0, typical_p=0.5)) == keep[0]


def test_xtc_drops_the_top_choices_with_its_probability():
    l = np.array([3.0, 2.8, 2.6, 0.0, -0.5, -3.0], np.float32)
    p = _probs(l.astype(np.float64), 1.0)
    above = int(np.sum(p >= 0.1))
    assert above >= 2
    cfg = SamplerConfig(temperature=1.0, xtc_probability=0.3, xtc_threshold=0.1, seed=9)
    draws = np.array([sample(l, cfg, counter=c) for c in range(4000)])
    coins = np.array([uniform(cfg.seed ^ sampling.XTC_STREAM, c) <= 0.3 for c in range(4000)])
    assert 0.25 < coins.mean() < 0.35
    assert draws[coins].min() == above - 1                # the least likely of the top choices survives
    assert draws[~coins].min() == 0
    # threshold above 0.5: never applies
    off = SamplerConfig(temperature=1.0, xtc_probability=1.0, xtc_threshold=0.6, seed=9)
    assert [sample(l, off, counter=c) for c in range(50)] == [
        sample(l, SamplerConfig(temperature=1.0, seed=9), counter=c) for c in range(50)]


def test_dynamic_temperature_follows_the_entropy():
    """dynatemp: t = lo + (hi - lo) * (H / log n) ** exponent; a flat distribution gets the high end."""
    flat = np.zeros(8, np.float32)
    cfg = SamplerConfig(temperature=1.0, dynatemp_range=0.5, seed=3)
    assert [sample(flat, cfg, counter=c) for c in range(30)] == [
        sample(flat, SamplerConfig(temperature=1.5, seed=3), counter=c) for c in range(30)]
    peaked = np.array([5.0, 1.0, 0.5, 0.0], np.float32)
    p = _probs(peaked.astype(np.float64), 1.0)
    t = 0.5 + 1.0 * (-(p * np.log(p)).sum() / math.log(4)) ** 2.0
    dyn = SamplerConfig(temperature=1.0, dynatemp_range=0.5, dynatemp_exponent=2.0)
    draws = np.array([sample(peaked, dyn, counter=c) for c in range(4000)])
    want = _probs(peaked.astype(np.float64), t)
    assert np.abs(np.bincount(draws, minlength=4) / 4000 - want).max() < 0.03


def test_mirostat_v2_tracks_its_target_surprise():
    """Mirostat 2: mu moves by eta * (target - observed surprise); over a long run the mean surprise of
    the drawn tokens approaches tau."""
    g = np.random.default_rng(1)
    cfg = SamplerConfig(temperature=1.0, mirostat=2, mirostat_tau=3.0, mirostat_eta=0.1, seed=4)
    mu, surprises = 2 * 3.0, []
    for c in range(600):
        l = (g.standard_normal(400) * 2).astype(np.float32)
        d = draw(l, cfg, counter=c, mu=mu)
        cand = sampling.candidates(l)
        p = _probs(l[cand].astype(np.float64), 1.0)
        keep = max(1, int(np.sum(-np.log2(p) <= mu)))
        pk = p[:keep] / p[:keep].sum()
        idx = int(np.flatnonzero(cand == d.token)[0])
        assert idx < keep
        s = -math.log2(pk[idx])
        assert d.mu == pytest.approx(mu - 0.1 * (s - 3.0), abs=1e-4)
        mu = d.mu
        surprises.append(s)
    assert abs(np.mean(surprises[100:]) - 3.0) < 0.3


def test_mirostat_v1_truncates_to_its_estimated_k():
    l = np.log(1.0 / np.arange(1, 301) ** 1.1).astype(np.float32)       # Zipf: s_hat = 1.1
    cfg = SamplerConfig(temperature=1.0, mirostat=1, mirostat_tau=2.0, seed=2)
    eps = 0.1
    k = (eps * 2 ** 4.0 / (1 - 300 ** -eps)) ** (1 / 1.1)
    draws = {draw(l, cfg, counter=c, mu=4.0).token for c in range(3000)}
    assert max(draws) == int(k) - 1 or max(draws) == int(k)


def test_dry_follows_llama_cpp():
    """DRY on llama.cpp's own example: a b c c b c y a b c -> c (3 -> 4), b (1 -> 2: under the allowed
    length 2, no penalty), y (2 -> 3); a breaker stops a repetition from reaching across it."""
    a, b, c, y = 1, 2, 3, 4
    seq = [a, b, c, c, b, c, y, a, b, c]
    dry = DryConfig(multiplier=0.8, base=1.75, allowed_length=2, penalty_last_n=-1)
    pen = sampling.dry_penalties(seq, dry, 100)
    assert set(pen) == {c, y}
    assert pen[c] == pytest.approx(0.8 * 1.75 ** (3 - 2))
    assert pen[y] == pytest.approx(0.8 * 1.75 ** (2 - 2))
    # b breaks sequences: the repetition "a b c" can only reach back to the last b
    broken = sampling.dry_penalties(seq, DryConfig(0.8, 1.75, 1, -1, {b: ((),)}), 100)
    assert set(broken) == {c, y} and broken[c] == pytest.approx(0.8)
    assert sampling.dry_penalties(seq, DryConfig(0.8, 1.75, 2, 3), 100) == {}   # window too short
    logits = np.zeros(6, np.float32)
    got = sampling.processed_logits(logits, SamplerConfig(), seq, adjust=pen)
    assert got[c] == np.float32(-pen[c]) and got[a] == 0


def test_dry_breakers_from_strings():
    pieces = [b"a", b"\n", b"x\n", b"ab", b":", b"b:c"]
    br = sampling.dry_breakers(pieces, lambda s: [5] if s == "c" else [0], ["\n", ":c"])
    assert br[1] == ((),) and br[2] == ((),)
    assert br[4] == ((5,),)            # ":" then "c" completes ":c"
    assert br[5] == ((),)


def test_constraint_mask_bans_tokens():
    l = np.array([5.0, 4.0, 3.0, 2.0, 1.0] * 10, np.float32)
    mask = np.zeros(2, np.uint32)
    mask[0] = (1 << 3) | (1 << 7)
    mask[1] = 1 << (40 - 32)
    allowed = {3, 7, 40}
    for c in range(200):
        assert sample(l, SamplerConfig(temperature=2.0, seed=1), counter=c, mask=mask) in allowed
    assert sample(l, SamplerConfig(), mask=mask) == 40            # 40 is 5.0, 3 is 2.0, 7 is 2.0


def test_logprobs_are_log_softmax_of_the_processed_logits():
    g = np.random.default_rng(2)
    l = g.standard_normal(1000).astype(np.float32) * 2
    cfg = SamplerConfig(temperature=0.9, seed=5, n_logprobs=5, logit_bias={3: 2.0})
    d = draw(l, cfg, recent=[], counter=1)
    ref = l.astype(np.float64)
    ref[3] += 2.0
    lse = ref.max() + np.log(np.exp(ref - ref.max()).sum())
    assert d.logprob == pytest.approx(ref[d.token] - lse, abs=1e-5)
    top = np.argsort(-ref, kind="stable")[:5]
    assert [t for t, _ in d.top] == top.tolist()
    assert [v for _, v in d.top] == pytest.approx((ref[top] - lse).tolist(), abs=1e-5)


def test_same_seed_same_tokens():
    l = np.random.default_rng(1).standard_normal(300).astype(np.float32)
    cfg = SamplerConfig(temperature=0.9, top_k=40, seed=77)
    a = [sample(l, cfg, counter=c) for c in range(50)]
    assert a == [sample(l, cfg, counter=c) for c in range(50)]
    assert a != [sample(l, SamplerConfig(temperature=0.9, top_k=40, seed=78), counter=c) for c in range(50)]


def test_slot_layout_is_the_wgsl_struct():
    assert sampling.SLOT_WGSL.count(":") - 2 == sampling.SLOT_WORDS      # fields (+ the two consts)
    w = sampling.pack_slot(SamplerConfig(temperature=0.5, seed=9, n_logprobs=-1), 12, 3, mu=1.5)
    assert sampling.slot_value(w, "n_hist") == 12 and sampling.slot_value(w, "counter") == 3
    assert sampling.slot_value(w, "mu") == 1.5 and sampling.slot_value(w, "temperature") == 0.5
    assert sampling.slot_value(w, "n_logprobs") == -1


# -- the device sampler -----------------------------------------------------------------------------

SPEC = dict(sampling.DEVICE_SPEC)
TYPES = ["f32", "i32", "i32", "i32", "i32", "i32"]


class Device:
    """The sample kernel on S slots with fresh buffers; ``run`` draws once per slot."""

    def __init__(self, dev, vocab: int, S: int, cap: int = 64, nb: int = 16, greedy: bool = False):
        from oxigpu.backends.wgpu.kernel import prepare
        self.dev, self.S, self.V, self.cap, self.nb = dev, S, vocab, cap, nb
        ins = [np.zeros((S, vocab), np.float32), np.zeros((S, sampling.SLOT_WORDS), np.int32),
               np.full((S, cap), -1, np.int32), np.zeros((S, nb, 2), np.int32),
               np.full((S, -(-vocab // 32)), -1, np.int32),
               np.zeros((S, 1, 1 + sampling.N_LOGPROBS_MAX, 2), np.int32)]
        self.p = prepare("sample", ins, {**SPEC, "greedy": greedy}, TYPES, dev)

    def load(self, batch: sampling.SlotBatch, histories: list[list[int]]) -> None:
        b = self.p.in_bufs
        self.dev.write(b[1], batch.slots.view(np.int32))
        sparse = np.zeros((self.S, self.nb, 2), np.uint32)
        sparse[:, :batch.sparse.shape[1]] = batch.sparse
        self.dev.write(b[3], sparse.view(np.int32))
        if batch.mask is not None:
            self.dev.write(b[4], batch.mask.view(np.int32))
        ring = np.full((self.S, self.cap), -1, np.int32)
        for s, h in enumerate(histories):
            for q in range(max(0, len(h) - self.cap), len(h)):
                ring[s, q % self.cap] = h[q]
        self.dev.write(b[2], ring)

    def run(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(tokens, slot words after, logprob rows)."""
        b = self.p.in_bufs
        self.dev.write(b[0], np.ascontiguousarray(logits, np.float32))
        self.dev.submit(self.p.dispatches)
        tok = self.dev.read(self.p.out_bufs[0], np.int32, (self.S,))
        slots = self.dev.read(b[1], np.int32, (self.S, sampling.SLOT_WORDS)).view(np.uint32)
        lp = self.dev.read(b[5], np.int32, (self.S, 1 + sampling.N_LOGPROBS_MAX, 2))
        return tok, slots, lp


def _logits(g: np.random.Generator, S: int, V: int, step: int) -> np.ndarray:
    """Synthetic logits: a spread of magnitudes, a few small ids boosted (so repetition matters), exact
    ties at the top now and then, NaN now and then."""
    l = (g.standard_normal((S, V)) * 2.5).astype(np.float32)
    l[:, :24] += 3.0
    if step % 5 == 1:
        l[:, g.integers(0, V, 3)] = l.max(axis=1, keepdims=True)
    if step % 7 == 3:
        l[np.arange(S), g.integers(0, V, S)] = np.nan
    return l


SAMPLERS = {
    "greedy": SamplerConfig(),
    "default chain": SamplerConfig(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
    "temperature": SamplerConfig(temperature=1.3),
    "top-k": SamplerConfig(temperature=1.0, top_k=7),
    "top-p": SamplerConfig(temperature=1.0, top_p=0.7),
    "min-p": SamplerConfig(temperature=1.0, min_p=0.2),
    "typical-p": SamplerConfig(temperature=1.0, typical_p=0.6),
    "top-n-sigma": SamplerConfig(temperature=1.0, top_n_sigma=1.2),
    "xtc": SamplerConfig(temperature=1.0, xtc_probability=0.5, xtc_threshold=0.05),
    "dynatemp": SamplerConfig(temperature=0.9, dynatemp_range=0.6, dynatemp_exponent=1.5),
    "penalties": SamplerConfig(temperature=1.0, repeat_penalty=1.3, penalty_last_n=24, frequency_penalty=0.2,
                               presence_penalty=0.3),
    "logit bias": SamplerConfig(temperature=1.0, logit_bias={0: 2.5, 5: 1.5, 3: float("-inf"), 299: 8.0}),
    "dry": SamplerConfig(temperature=1.0),
    "mirostat 1": SamplerConfig(temperature=1.0, mirostat=1, mirostat_tau=3.0, mirostat_eta=0.2),
    "mirostat 2": SamplerConfig(temperature=1.0, mirostat=2, mirostat_tau=3.0, mirostat_eta=0.2),
    "logprobs": SamplerConfig(temperature=0.8, top_k=40, n_logprobs=20),
    "mask": SamplerConfig(temperature=1.0),
}
DRY = DryConfig(multiplier=1.5, base=1.75, allowed_length=2, penalty_last_n=40, breakers={11: ((),), 12: ((13,),)})


@pytest.mark.gpu
def test_every_sampler_equals_numpy_over_1000_draws(dev):
    """Every sampler on 4 slots each (their own seeds) in one batch of 68 slots, 250 steps: 1,000 draws per
    sampler, each token the numpy twin's; the kernel advances each slot's history length, RNG counter and
    mirostat mu as the twin does; logprobs (the chosen token's and 20 alternatives) within 1e-3; masked
    slots draw only allowed tokens."""
    V, per, steps = 300, 4, 250
    g = np.random.default_rng(0)
    cfgs, names = [], []
    for name, cfg in SAMPLERS.items():
        for k in range(per):
            cfgs.append(SamplerConfig(**{**cfg.__dict__, "seed": 1000 * len(names) + 7 * k + 1}))
            names.append(name)
    S = len(cfgs)
    d = Device(dev, V, S)
    hist = [g.integers(0, 30, 40).tolist() for _ in range(S)]
    mus = [2 * c.mirostat_tau for c in cfgs]
    bad: dict[str, int] = {}
    lp_err = 0.0
    for step in range(steps):
        logits = _logits(g, S, V, step)
        masks = [None] * S
        for s, n in enumerate(names):
            if n == "mask":
                masks[s] = np.asarray(g.integers(0, 2**32, -(-V // 32)), np.uint32)
                masks[s][0] |= 1                                   # never empty
        adjusts = [sampling.dry_penalties(h, DRY, 512) if n == "dry" else None for h, n in zip(hist, names)]
        batch = sampling.pack_batch(cfgs, [len(h) for h in hist], [step] * S, mus, adjusts, masks, vocab=V)
        d.load(batch, hist)
        tok, slots, lp = d.run(logits)
        for s, cfg in enumerate(cfgs):
            want = draw(logits[s], cfg, hist[s], step, masks[s], mus[s], adjusts[s])
            if int(tok[s]) != want.token:
                bad[names[s]] = bad.get(names[s], 0) + 1
            if masks[s] is not None:
                assert sampling.mask_allows(masks[s], V)[tok[s]]
            assert sampling.slot_value(slots[s], "n_hist") == len(hist[s]) + 1
            assert sampling.slot_value(slots[s], "counter") == step + 1
            if cfg.mirostat:
                assert sampling.slot_value(slots[s], "mu") == pytest.approx(want.mu, abs=1e-4)
            if cfg.n_logprobs >= 0:
                vals = lp[s, :, 1].copy().view(np.float32)
                assert lp[s, 0, 0] == want.token and lp[s, 1:, 0].tolist() == [t for t, _ in want.top]
                lp_err = max(lp_err, abs(vals[0] - want.logprob),
                             max(abs(v - w) for v, (_, w) in zip(vals[1:], want.top)))
            hist[s].append(want.token)
            mus[s] = want.mu
    assert not bad, f"device draws that differ from numpy's, per sampler (of {per * steps}): {bad}"
    assert lp_err <= 1e-3


@pytest.mark.gpu
@pytest.mark.parametrize("vocab", [5, 3001, 40000])
def test_greedy_variant_equals_numpy(dev, vocab):
    """The one-candidate variant (K = 1 rounds, the last recording the token) against the numpy sampler at
    temperature 0 over 12 steps on 4 slots: ties at the top (across and inside a workgroup's ids), NaN,
    bias and penalty ids overlapping, a banned top token, penalties that lift; a 5-token vocabulary."""
    cfgs = [SamplerConfig(),
            SamplerConfig(repeat_penalty=1.3, penalty_last_n=6, logit_bias={1: 4.0, 2: -1e9}),
            SamplerConfig(repeat_penalty=0.5, penalty_last_n=30, frequency_penalty=-0.7, presence_penalty=0.2,
                          logit_bias={3: 2.0, 4: float("-inf")}),
            SamplerConfig(repeat_penalty=0.2, penalty_last_n=31, presence_penalty=-3.0, logit_bias={1: -2.0})]
    S = len(cfgs)
    g = np.random.default_rng(vocab)
    d = Device(dev, vocab, S, greedy=True)
    assert len(d.p.dispatches) == (1 if vocab <= sampling.CH else 2)
    hist = [g.integers(0, min(vocab, 20), 40).tolist() for _ in range(S)]
    d.load(sampling.pack_batch(cfgs, [len(h) for h in hist], [0] * S), hist)
    for step in range(12):
        l = (g.standard_normal((S, vocab)) * 3).astype(np.float32)
        top = l.max()
        w = min(vocab, 20)
        l[:, :w] = top + 3.0 + g.random((S, w)).astype(np.float32) * 2.0   # the window's ids straddle the top
        l[:, g.integers(0, vocab, 3)] = top + 4.0                         # exact ties, in and off the window
        if step % 3 == 1:
            l[:, g.integers(0, vocab, 4)] = np.nan
        if step == 5:
            l[:, vocab - 1] = top + 100.0                                 # the best id is the last
        if step == 3 and vocab > 4 * 1024 + 40:                           # ties two workgroups apart
            l[:, [30, 2048 + 30]] = top + 60.0
        tok, _, _ = d.run(l)
        for s, cfg in enumerate(cfgs):
            want = sample(l[s], cfg, hist[s], step)
            assert tok[s] == want, (s, step)
            hist[s].append(want)


@pytest.mark.gpu
def test_full_gemma_vocab_batched_or_alone(dev):
    """262,144 logits (128 -> 16 -> 2 -> 1 workgroups per slot): nucleus sampling, top-n-sigma and logprobs
    over 128 chunks' statistics; the same seed and counter draw the same token batched or alone."""
    vocab = 262144
    g = np.random.default_rng(3)
    cfgs = [SamplerConfig(temperature=0.8, top_p=0.9, seed=11, n_logprobs=3),
            SamplerConfig(temperature=1.0, top_n_sigma=2.0, seed=12),
            SamplerConfig(temperature=0.7, seed=13, logit_bias={5: 30.0})]
    logits = (g.standard_normal((3, vocab)) * 0.5).astype(np.float32)
    hist = [[1] * 20 for _ in cfgs]
    batch = Device(dev, vocab, 3)
    assert len(batch.p.dispatches) == 5
    alone = Device(dev, vocab, 1)
    for c in range(2):
        batch.load(sampling.pack_batch(cfgs, [20] * 3, [c] * 3), hist)
        tok, _, lp = batch.run(logits)
        for s, cfg in enumerate(cfgs):
            want = draw(logits[s], cfg, hist[s], c)
            assert tok[s] == want.token
            alone.load(sampling.pack_batch([cfg], [20], [c]), hist[s:s + 1])
            assert alone.run(logits[s:s + 1])[0][0] == want.token
            if cfg.n_logprobs >= 0:
                assert abs(lp[s, 0, 1:].view(np.float32)[0] - want.logprob) <= 1e-3


@pytest.mark.gpu
def test_inactive_slots_are_left_alone(dev):
    d = Device(dev, 100, 2)
    cfgs = [SamplerConfig(temperature=1.0, seed=1), SamplerConfig()]
    batch = sampling.pack_batch(cfgs, [3, 3], [0, 0])
    batch.slots[1] = sampling.pack_slot(cfgs[1], 3, 0, active=False)
    d.load(batch, [[1, 2, 3], [1, 2, 3]])
    _, slots, _ = d.run(np.random.default_rng(0).standard_normal((2, 100)).astype(np.float32))
    assert sampling.slot_value(slots[0], "n_hist") == 4 and sampling.slot_value(slots[1], "n_hist") == 3
