"""The sampler: numpy semantics (llama.cpp chain order, ties, penalties, filters, RNG) and the device
sampler drawing the same token as numpy, token for token, over many settings, seeds and counters."""
from __future__ import annotations

import math

import numpy as np
import pytest

from oxigpu.backends.wgpu.device import Params
from oxigpu.backends.wgpu.kernel import prepare
from oxigpu.backends.wgpu.ops.sample import CH, sample_inputs
from oxigpu.runtime import sampling
from oxigpu.runtime.sampling import SamplerConfig, sample, uniform


def test_rng_is_fixed_and_uniform():
    # golden values: changing the RNG changes every seeded generation, on every backend
    assert [sampling.pcg_hash(x) for x in (0, 1, 2**32 - 1)] == [129708002, 2831084092, 3861530882]
    assert uniform(0, 0) == (sampling.pcg_hash(sampling.pcg_hash(0)) >> 8) / 2**24
    u = np.array([uniform(1234, c) for c in range(20000)])
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.03
    assert uniform(1, 5) != uniform(2, 5)
    assert sampling.fold_seed(2**40 + 7) == (7 ^ 2**8)


def test_greedy_takes_lowest_id_on_ties():
    logits = np.array([1.0, 3.0, 2.0, 3.0, -1.0], np.float32)
    assert sample(logits, SamplerConfig(temperature=0.0)) == 1
    cfg = SamplerConfig(temperature=0.0, logit_bias={1: -1.0})
    assert sample(logits, cfg) == 3


def test_penalties_follow_llama_cpp():
    logits = np.array([2.0, -2.0, 1.0, 0.5], np.float32)
    cfg = SamplerConfig(repeat_penalty=2.0, frequency_penalty=0.25, presence_penalty=0.5, penalty_last_n=3)
    got = sampling.apply_bias_and_penalties(logits, cfg, recent=[2, 0, 1, 1, 0])   # window: 1, 1, 0
    # token 0 (once): 2/2 - 0.25 - 0.5; token 1 (twice): -2*2 - 0.5 - 0.5; 2 is outside the window
    np.testing.assert_array_equal(got, np.array([0.25, -5.0, 1.0, 0.5], np.float32))


def _probs(l: np.ndarray, temp: float) -> np.ndarray:
    e = np.exp((l - l.max()) / temp)
    return e / e.sum()


def test_filters_keep_the_documented_sets():
    g = np.random.default_rng(0)
    l = np.sort(g.standard_normal(50).astype(np.float32))[::-1].copy()   # id order = rank order
    p1 = _probs(l.astype(np.float64), 1.0)
    # top-p at temperature 1: shortest prefix with mass >= 0.6; min-p: p >= 0.2 * p_max
    n_p = int(np.argmax(np.cumsum(p1) >= 0.6)) + 1
    n_m = int(np.sum(p1 / p1[0] >= 0.2))
    n_p8 = int(np.argmax(np.cumsum(p1[:8] / p1[:8].sum()) >= 0.6)) + 1   # top-p renormalizes after top-k
    for cfg, n_keep in [(SamplerConfig(temperature=1.5, top_k=5), 5),
                        (SamplerConfig(temperature=0.7, top_p=0.6), n_p),
                        (SamplerConfig(temperature=2.0, min_p=0.2), n_m),
                        (SamplerConfig(temperature=1.0, top_k=8, top_p=0.6, min_p=0.2), min(n_p8, n_m))]:
        draws = np.array([sample(l, cfg, counter=c) for c in range(3000)])
        assert draws.max() < n_keep and len(np.unique(draws)) == n_keep
        want = _probs(l[:n_keep].astype(np.float64), cfg.temperature)
        freq = np.bincount(draws, minlength=n_keep) / draws.size
        assert np.abs(freq - want).max() < 0.035, (cfg, freq, want)


def test_top_k_zero_means_k_max_candidates():
    l = np.zeros(1000, np.float32)
    draws = {sample(l, SamplerConfig(temperature=1.0), counter=c) for c in range(4000)}
    assert max(draws) == sampling.K_MAX - 1 and min(draws) == 0


def test_same_seed_same_tokens():
    l = np.random.default_rng(1).standard_normal(300).astype(np.float32)
    cfg = SamplerConfig(temperature=0.9, top_k=40, seed=77)
    a = [sample(l, cfg, counter=c) for c in range(50)]
    assert a == [sample(l, cfg, counter=c) for c in range(50)]
    assert a != [sample(l, SamplerConfig(temperature=0.9, top_k=40, seed=78), counter=c) for c in range(50)]


# -- the device sampler -----------------------------------------------------------------------------

CONFIGS = [
    SamplerConfig(temperature=0.0),
    SamplerConfig(temperature=0.0, repeat_penalty=1.3, penalty_last_n=6, logit_bias={5: 4.0, 17: -1e9}),
    SamplerConfig(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=1),
    SamplerConfig(temperature=1.0, seed=2),
    SamplerConfig(temperature=1.3, top_k=3, seed=3),
    SamplerConfig(temperature=0.6, top_p=0.5, seed=4, repeat_penalty=1.1, penalty_last_n=12,
                  frequency_penalty=0.2, presence_penalty=0.3),
    SamplerConfig(temperature=2.0, min_p=0.3, seed=5, logit_bias={0: 2.5, 9: 1.5, 3: float("-inf")}),
]


def _params(cfg: SamplerConfig, pos: int, n_tokens: int, counter: int) -> Params:
    return Params(pos=pos, n_tokens=n_tokens, seed=cfg.seed, counter=counter, top_k=cfg.top_k,
                  penalty_last_n=cfg.penalty_last_n, temperature=cfg.temperature, top_p=cfg.top_p,
                  min_p=cfg.min_p, repeat_penalty=cfg.repeat_penalty,
                  presence_penalty=cfg.presence_penalty, frequency_penalty=cfg.frequency_penalty)


def _generation(dev, p, base, seq, n_tokens, T, steps=12):
    """The steps of a device generation: before each step after the first, the last id of ``seq`` is fed
    to the prepared sample kernel ``p`` (its T id rows); yields (step, first position, rows, that step's logits: ``base``
    moved by a step-dependent wave) for the caller to check and append to ``seq``."""
    vocab = base.shape[1]
    for step in range(steps):
        n = n_tokens if step == 0 else 1
        if step:
            dev.write(p.in_bufs[1], np.array([seq[-1]] + [0] * (T - 1), np.int32))
        wave = np.float32(0.37 * step) * np.cos(np.arange(vocab, dtype=np.float32) * step)
        yield step, len(seq) - n, n, (base + wave).astype(np.float32)


def _step_matches_numpy(dev, p, cfg, seq, logits, start, n, step, ci):
    """One step of the prepared sample kernel ``p`` on ``logits``: its id is numpy's, then appended to seq."""
    dev.write(p.in_bufs[0], logits)
    dev.write_params(_params(cfg, start, n, step))
    dev.submit(p.dispatches)
    got = int(dev.read(p.out_bufs[0], np.int32, 1)[0])
    want = sample(logits, cfg, seq, counter=step)
    assert got == want, (ci, step, got, want)
    seq.append(want)


def _ring_holds(dev, p, cap, seq):
    """The kernel's history ring holds the last ``cap`` ids of seq."""
    ring = dev.read(p.in_bufs[2], np.int32, cap)
    assert all(ring[q % cap] == seq[q] for q in range(len(seq) - cap, len(seq)))


@pytest.mark.gpu
@pytest.mark.parametrize("vocab,T,n_tokens", [(3000, 1, 1), (40000, 4, 2)])
def test_device_draws_equal_numpy(dev, vocab, T, n_tokens):
    """Per config, a generation of 12 tokens: the device's ring feeds its own penalties, and every token
    (and the ring) must equal the numpy sampler's."""
    cap = 32
    g = np.random.default_rng(vocab)
    for ci, cfg in enumerate(CONFIGS):
        history = [int(t) for t in g.integers(0, 20, 40)]       # small ids: the penalties matter
        pos = 40 - T
        bias = dict(cfg.logit_bias)
        ins = sample_inputs(vocab, T, cap, bias, history, pos, seed=ci)
        ins[0][0, :20] += 4.0                                    # the penalized ids compete for the top
        p = prepare("sample", ins, in_types=["f32", "i32", "i32", "i32", "f32"], dev=dev)
        seq = history[:pos + n_tokens]
        for step, start, n, logits in _generation(dev, p, ins[0], seq, n_tokens, T):
            _step_matches_numpy(dev, p, cfg, seq, logits, start, n, step, ci)
        _ring_holds(dev, p, cap, seq)


@pytest.mark.gpu
def test_device_sampler_full_gemma_vocab(dev):
    """262,144 logits (4 rounds of sorts), nucleus sampling: same tokens as numpy over 8 counters."""
    vocab = 262144
    cfg = SamplerConfig(temperature=0.8, top_k=0, top_p=0.9, seed=11)
    ins = sample_inputs(vocab, 1, 16, {}, [1] * 20, 19, seed=3)
    ins[0] *= np.float32(0.3)                                    # flat: many candidates stay in play
    p = prepare("sample", ins, in_types=["f32", "i32", "i32", "i32", "f32"], dev=dev)
    assert len(p.dispatches) == 5
    for c in range(8):
        dev.write_params(_params(cfg, 19, 1, c))
        dev.submit(p.dispatches)
        got = int(dev.read(p.out_bufs[0], np.int32, 1)[0])
        assert got == sample(ins[0], cfg, [1] * 20, counter=c)
    assert math.isfinite(float(ins[0].max()))


GREEDY_CONFIGS = [
    SamplerConfig(),
    SamplerConfig(repeat_penalty=1.3, penalty_last_n=6, logit_bias={5: 4.0, 17: -1e9}),
    # bias ids inside the penalty window (biased, then penalized), a banned top token, a boost
    SamplerConfig(repeat_penalty=0.5, penalty_last_n=30, frequency_penalty=-0.7, presence_penalty=0.2,
                  logit_bias={3: 2.0, 11: float("-inf"), 2000: 0.5}),
    # penalties that lift: the window's tokens compete from below
    SamplerConfig(repeat_penalty=0.2, penalty_last_n=31, presence_penalty=-3.0, logit_bias={1: -2.0}),
]


@pytest.mark.gpu
@pytest.mark.parametrize("vocab,T,n_tokens", [(3001, 1, 1), (40000, 4, 2), (5, 1, 1)])
def test_device_greedy_equals_numpy(dev, vocab, T, n_tokens):
    """The greedy sampler (K = 1 rounds, the last recording the token) against the numpy
    sampler at temperature 0 over 12-token generations: ties at the top (across and inside one
    invocation's ids), NaN logits, bias and penalty ids overlapping, a vocabulary that is not a multiple
    of 4 (the tail ids) and one of 5 ids."""
    cap = 32
    g = np.random.default_rng(vocab + 1)
    for ci, cfg in enumerate(GREEDY_CONFIGS):
        history = [int(t) for t in g.integers(0, min(vocab, 20), 40)]
        pos = 40 - T
        bias = {t: b for t, b in cfg.logit_bias.items() if t < vocab}
        cfg = SamplerConfig(**{**cfg.__dict__, "logit_bias": bias})
        ins = sample_inputs(vocab, T, cap, bias, history, pos, seed=ci)
        p = prepare("sample", ins, {"greedy": True}, in_types=["f32", "i32", "i32", "i32", "f32"], dev=dev)
        assert len(p.dispatches) == (1 if vocab <= CH else 2)      # the last round records the token
        seq = history[:pos + n_tokens]
        for step, start, n, logits in _generation(dev, p, ins[0], seq, n_tokens, T):
            top = logits.max()
            w = min(vocab, 20)                                   # the window's ids straddle the top
            logits[0, :w] = top + 3.0 + g.random(w).astype(np.float32) * 2.0
            logits[0, g.integers(0, vocab, 3)] = top + 4.0       # exact ties, in and off the window
            if step % 3 == 1:
                logits[0, g.integers(0, vocab, 4)] = np.nan
            if step == 5:
                logits[0, vocab - 1] = top + 100.0               # the best id is the last (a tail id)
            if step == 2 and vocab > 104:                        # ties inside one invocation's ids:
                logits[0, 100:104] = top + 50.0                  # one vec4,
            if step == 3 and vocab > 4 * 1024 + 40:              # and two vec4s a workgroup apart
                logits[0, [4 * 7 + 2, 4 * (7 + 1024) + 2]] = top + 60.0
            _step_matches_numpy(dev, p, cfg, seq, logits.astype(np.float32), start, n, step, ci)
        _ring_holds(dev, p, cap, seq)
