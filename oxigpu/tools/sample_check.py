"""The ``sample`` kernel check: the batched GPU sampler against its numpy twin, ``runtime/sampling.py``.

It lives here rather than beside the kernel because the sampler's semantics and slot layout belong to the
runtime, which the device layer may not import; :func:`oxigpu.tools.kernels.load_checks` registers it.
Each case is one draw for S slots, every slot with its own settings, history, biases, mask and logprobs,
compared token for token (and state word for word) with the twin; logprobs within 1e-3.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..backends.wgpu.kernel import check
from ..errors import NumericalError
from ..runtime import sampling
from ..runtime.sampling import DryConfig, SamplerConfig
from .kernels import ComparedCase

CAP = 64        # history ring per slot (penalties and DRY look at most this far back here)
LPR = 2         # logprob rows per slot: a draw writes row counter % LPR
TYPES = ["f32", "i32", "i32", "i32", "i32", "i32"]
MU_TOL = 1e-4   # mirostat's updated target: exp/log may differ by an ulp between numpy and a GPU
LOGPROB_TOL = 1e-3

_DRY = DryConfig(multiplier=1.5, base=1.75, allowed_length=2, penalty_last_n=40,
                 breakers={11: ((),), 12: ((13,),)})


def _chain(vocab: int) -> list[tuple[str, SamplerConfig]]:
    """One slot per stage of the chain (biases on ids this vocabulary has)."""
    last = vocab - 1
    return [
        ("greedy", SamplerConfig(repeat_penalty=1.3, penalty_last_n=8)),
        ("default chain", SamplerConfig(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)),
        ("temperature", SamplerConfig(temperature=1.3)),
        ("top-k", SamplerConfig(temperature=1.0, top_k=3)),
        ("top-p", SamplerConfig(temperature=1.0, top_p=0.7)),
        ("min-p", SamplerConfig(temperature=1.0, min_p=0.2)),
        ("typical-p", SamplerConfig(temperature=1.0, typical_p=0.6)),
        ("top-n-sigma", SamplerConfig(temperature=1.0, top_n_sigma=1.2)),
        ("xtc", SamplerConfig(temperature=1.0, xtc_probability=0.9, xtc_threshold=0.05)),
        ("dynatemp", SamplerConfig(temperature=0.9, dynatemp_range=0.6, dynatemp_exponent=1.5)),
        ("penalties", SamplerConfig(temperature=1.0, repeat_penalty=1.3, penalty_last_n=24,
                                    frequency_penalty=0.2, presence_penalty=0.3)),
        ("logit bias", SamplerConfig(temperature=1.0, logit_bias={0: 2.5, last: 8.0, min(3, last): -math.inf})),
        ("dry", SamplerConfig(temperature=1.0)),
        ("mirostat 1", SamplerConfig(temperature=1.0, mirostat=1, mirostat_tau=3.0, mirostat_eta=0.2)),
        ("mirostat 2", SamplerConfig(temperature=1.0, mirostat=2, mirostat_tau=3.0, mirostat_eta=0.2)),
        ("logprobs", SamplerConfig(temperature=0.8, top_k=40, n_logprobs=sampling.N_LOGPROBS_MAX)),
        ("greedy logprobs", SamplerConfig(n_logprobs=2)),
        ("mask", SamplerConfig(temperature=1.0)),
        ("mask allows nothing", SamplerConfig(temperature=1.0)),     # nothing drawable: the kernel's -1
        ("padding", SamplerConfig(temperature=1.0)),                 # an inactive slot: left alone
    ]


def _greedy(vocab: int) -> list[tuple[str, SamplerConfig]]:
    """Slots of the one-candidate variant: ties, penalties that lift or sink, biases at the f32 limits."""
    last = vocab - 1
    return [
        ("plain", SamplerConfig()),
        ("penalties", SamplerConfig(repeat_penalty=0.5, penalty_last_n=30, frequency_penalty=-0.7,
                                    presence_penalty=0.2, logit_bias={min(3, last): 2.0, min(4, last): -math.inf})),
        ("f32-limit bias ties", SamplerConfig(logit_bias={min(1, last): 3e38, last: 3e38})),
        ("+inf bias", SamplerConfig(logit_bias={last: math.inf})),
        ("all NaN", SamplerConfig()),                                # nothing drawable: -1
    ]


@dataclass
class _Slot:
    name: str
    cfg: SamplerConfig
    history: list[int]
    counter: int
    mu: float = 0.0
    adjust: dict[int, float] | None = None
    mask: np.ndarray | None = None
    active: bool = True


def _logits(g: np.random.Generator, S: int, V: int) -> np.ndarray:
    """A spread of magnitudes, a few small ids boosted (repetition matters), exact ties at the top."""
    l = (g.standard_normal((S, V)) * 2.5).astype(np.float32)
    l[:, :min(V, 24)] += 3.0
    l[:, g.integers(0, V, 2)] = l.max(axis=1, keepdims=True)
    return l


def _case(name: str, vocab: int, specs: list[tuple[str, SamplerConfig]], seed: int, greedy: bool = False,
          nan_rows: Sequence[str] = ()) -> ComparedCase:
    g = np.random.default_rng(seed)
    S = len(specs)
    logits = _logits(g, S, vocab)
    slots = []
    for s, (label, cfg) in enumerate(specs):
        cfg = replace(cfg, seed=1000 * s + seed)
        hist = g.integers(0, min(vocab, 30), int(g.integers(CAP // 2, 2 * CAP))).tolist()
        slot = _Slot(label, cfg, hist, counter=int(g.integers(0, 50)),
                     mu=2 * cfg.mirostat_tau if cfg.mirostat else 0.0, active=label != "padding")
        if label == "dry":
            slot.adjust = sampling.dry_penalties(hist, _DRY, 512)
        if label.startswith("mask"):
            words = np.asarray(g.integers(0, 2**32, -(-vocab // 32)), np.uint32)
            words[0] |= 1                                           # never empty
            slot.mask = np.zeros_like(words) if label == "mask allows nothing" else words
        if label in nan_rows:
            logits[s] = np.nan
        elif s % 3 == 1:
            logits[s, g.integers(0, vocab)] = np.nan                # NaN counts as -inf
        slots.append(slot)
    batch = sampling.pack_batch([sl.cfg for sl in slots], [len(sl.history) for sl in slots],
                                [sl.counter for sl in slots], [sl.mu for sl in slots],
                                [sl.adjust for sl in slots], [sl.mask for sl in slots], vocab=vocab)
    assert batch.greedy == greedy, f"{name}: the slots' settings and the kernel variant disagree"
    for s, sl in enumerate(slots):
        if not sl.active:
            batch.slots[s] = sampling.pack_slot(sl.cfg, len(sl.history), sl.counter, active=False)
    ring = np.full((S, CAP), -1, np.int32)
    for s, sl in enumerate(slots):
        for q in range(max(0, len(sl.history) - CAP), len(sl.history)):
            ring[s, q % CAP] = sl.history[q]
    mask = batch.mask if batch.mask is not None else np.full((S, -(-vocab // 32)), 0xFFFFFFFF, np.uint32)
    lp = np.zeros((S, LPR, 1 + sampling.N_LOGPROBS_MAX, 2), np.uint32)
    inputs = [logits, batch.slots.view(np.int32), ring, batch.sparse.view(np.int32), mask.view(np.int32),
              lp.view(np.int32)]
    return ComparedCase(
        "sample", f"{name} vocab={vocab} S={S}", inputs, list(TYPES),
        lambda: _expected(inputs, slots), (0.0, 0.0, MU_TOL, LOGPROB_TOL),
        attrs={**sampling.DEVICE_SPEC, "greedy": greedy}, nbytes=logits.nbytes, compare=_compare)


def _expected(inputs: list[np.ndarray], slots: list[_Slot]) -> list[np.ndarray]:
    """What the kernel must leave: token ids [S], then its written inputs (slots, history ring, logprob
    rows) as uint32 words; the twin's draw per active slot (-1 where nothing can be drawn)."""
    logits = inputs[0]
    tokens = np.full(len(slots), -1, np.int64)
    words = inputs[1].view(np.uint32).copy()
    ring = inputs[2].copy()
    lp = inputs[5].view(np.uint32).copy()
    for s, sl in enumerate(slots):
        if not sl.active:
            continue
        try:
            d = sampling.draw(logits[s], sl.cfg, sl.history, sl.counter, sl.mask, sl.mu, sl.adjust)
        except NumericalError:
            d = sampling.Draw(-1, mu=sl.mu)
        tokens[s] = d.token
        words[s] = sampling.pack_slot(sl.cfg, len(sl.history) + 1, sl.counter + 1, d.mu, sl.mask is not None,
                                      len(sl.cfg.logit_bias), len(sl.adjust or {}))
        ring[s, len(sl.history) % CAP] = d.token
        if sl.cfg.n_logprobs >= 0 and d.token >= 0:
            row = lp[s, sl.counter % LPR]
            row[0] = (d.token, _f32_bits(d.logprob))
            for i, (t, v) in enumerate(d.top):
                row[1 + i] = (t, _f32_bits(v))
    return [tokens, words, ring.view(np.uint32), lp]


def _f32_bits(v: float) -> int:
    return int(np.array([v], np.float32).view(np.uint32)[0])


def _compare(case: ComparedCase, got: list[np.ndarray], want: list[np.ndarray]) -> tuple[float, float, str]:
    """(error, bound, what differs) of the worst part: mismatched tokens, state words (but mu) and ring
    entries are counted (bound 0); mu and logprob values are absolute differences. An inactive slot's
    token is not written (the kernel skips it), but its state must be left as it was."""
    tok_want, words_want, ring_want, lp_want = want
    tok = got[0].view(np.int32).astype(np.int64)
    words, ring, lp = (a.view(np.uint32) for a in got[1:4])
    active = (words_want[:, sampling.SLOT_FIELDS.index(("flags", "u32"))] & sampling.SLOT_ACTIVE) != 0
    mu_at = sampling.SLOT_FIELDS.index(("mu", "f32"))
    other = np.arange(sampling.SLOT_WORDS) != mu_at
    mu = np.abs(words[:, mu_at].view(np.float32).astype(np.float64)
                - words_want[:, mu_at].view(np.float32).astype(np.float64))
    lp_val = lp[..., 1].view(np.float32).astype(np.float64)
    lp_ref = lp_want[..., 1].view(np.float32).astype(np.float64)
    with np.errstate(invalid="ignore"):
        lp_diff = np.where(lp_val == lp_ref, 0.0, np.abs(lp_val - lp_ref))   # equal infinities agree
    parts = [
        ("tokens", int(np.count_nonzero(tok[active] != tok_want[active])), case.tol[0],
         [f"slot {s}: {tok[s]} != {tok_want[s]}" for s in np.flatnonzero(active & (tok != tok_want))]),
        ("state words", int(np.count_nonzero(words[:, other] != words_want[:, other])) +
         int(np.count_nonzero(ring != ring_want)) + int(np.count_nonzero(lp[..., 0] != lp_want[..., 0])),
         case.tol[1], []),
        ("mirostat mu", float(np.nan_to_num(mu, nan=np.inf).max()), case.tol[2], []),
        ("logprobs", float(np.nan_to_num(lp_diff, nan=np.inf).max()), case.tol[3], []),
    ]
    worst = max(parts, key=lambda p: p[1] / p[2] if p[2] else (math.inf if p[1] else 0.0))
    name, err, tol, detail = worst
    note = "" if err <= tol else f"{name} differ" + (f" ({'; '.join(detail[:3])})" if detail else "")
    return float(err), float(tol), note


@check("sample")
def _cases() -> Iterable[ComparedCase]:
    """The whole chain at vocabularies below a warp, below one sort chunk, off the 32-bit mask words and
    over several merge rounds; the one-candidate variant at the same sizes."""
    for vocab in (5, 3001):
        yield _case("chain", vocab, _chain(vocab), seed=vocab)
    for vocab in (151936, 262144):      # 75 and 128 first-round chunks: two and three merge rounds
        yield _case("chain", vocab, [s for s in _chain(vocab) if s[0] in (
            "default chain", "top-n-sigma", "logprobs", "penalties", "mask", "padding")], seed=vocab)
    for vocab in (5, 3001, 151936):
        yield _case("greedy", vocab, _greedy(vocab), seed=vocab + 1, greedy=True, nan_rows=("all NaN",))


@check("sample.bench", bench=True)
def _bench() -> Iterable[ComparedCase]:
    """One decode step's draw over large vocabularies (GB/s of logits read), both variants."""
    for vocab in (151936, 262144):
        yield _case("default chain", vocab, _chain(vocab)[1:2], seed=vocab)
        yield _case("greedy", vocab, _greedy(vocab)[:1], seed=vocab, greedy=True)
