"""The token sampler: numpy reference of ``shaders/sample.wgsl``, and the counter-based RNG both share.

Both backends must draw the same token for the same (logits, settings, seed, counter), so every choice
below is made to be reproducible on a GPU without float64 or 64-bit integers:

**Filter order** (llama.cpp's default chain; temperature comes *after* the truncation filters, so top-p and
min-p see the temperature-1 distribution, exactly as in llama.cpp):

1. logit bias: ``l[tok] += bias`` (a -inf bias bans a token);
2. penalties over the last ``penalty_last_n`` tokens of the sequence (prompt included), llama.cpp
   semantics: for each distinct token with ``c`` occurrences, ``l = l / repeat if l > 0 else l * repeat``,
   then ``l -= c * frequency + presence``;
3. candidates: the tokens sorted by (logit descending, token id ascending) — a strict total order, so ties
   resolve to the lowest id on every backend — truncated to ``top_k``; ``top_k`` 0 (or above
   :data:`K_MAX`) means :data:`K_MAX` candidates. The GPU cannot sort a 262k vocabulary every token, so the
   cap is part of the semantics here too;
4. temperature 0: the first candidate (greedy argmax, lowest id on ties). Otherwise:
5. top-p: softmax (temperature 1) over the candidates; keep the shortest prefix whose mass is >= top_p;
6. min-p: keep candidates with ``exp(l - l_max) >= min_p``;
7. temperature: weights ``w = exp((l - l_max) / temperature)`` over the kept prefix;
8. draw: ``u = uniform(seed, counter)``; the first candidate whose running weight sum exceeds
   ``u * sum(w)``. Running sums (here and in top-p) are a Hillis-Steele inclusive scan in f32
   (:func:`scan`), the order a GPU workgroup computes them in, so both backends add the same numbers
   in the same order.

**Non-finite logits**: a NaN logit counts as -inf (never drawn), on both backends; a +inf logit wins (the
lowest such id, as greedy). If no token is left above -inf (every logit NaN or -inf after bias and
penalties: broken weights or an overflow), the step raises :class:`~oxigpu.errors.NumericalError` naming
it; the device sampler writes id -1 there, which the runtime turns into the same error
(:func:`check_drawn`), so no id outside the vocabulary is ever returned. A draw that falls through (``u *
sum`` rounding up to the sum) takes the last candidate of non-zero weight, never a zero-weight one.

Float results (exp, division) can differ by an ulp between numpy and a GPU, so a draw can differ only when
``u`` falls within ~1e-6 of a cumulative boundary (or a top-p / min-p threshold): the chance per token is
of that order; the filters never depend on summation order.

**RNG**: ``uniform(seed, counter) = (pcg(pcg(seed) + counter) >> 8) * 2**-24`` with the PCG-RXS-M-XS hash
on u32 (Jarzynski & Olano 2020). Token ``i`` of a generation uses counter ``i``; the seed is folded to 32
bits by :func:`fold_seed` (the step params carry a u32 seed).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import NumericalError

K_MAX = 256
"""Most candidates kept after top-k (top_k 0 means this many); sample.wgsl's K define must equal it."""

_M32 = 0xFFFFFFFF


def pcg_hash(x: int) -> int:
    """PCG-RXS-M-XS 32-bit hash (the WGSL ``pcg_hash`` computes the same u32)."""
    state = (x * 747796405 + 2891336453) & _M32
    word = (((state >> ((state >> 28) + 4)) ^ state) * 277803737) & _M32
    return ((word >> 22) ^ word) & _M32


def uniform(seed: int, counter: int) -> float:
    """A uniform float in [0, 1) with 24 random bits: exact in f32, the same on every backend."""
    h = pcg_hash((pcg_hash(seed & _M32) + counter) & _M32)
    return (h >> 8) * (1.0 / (1 << 24))


def fold_seed(seed: int) -> int:
    """A 64-bit user seed as the u32 the step params carry (xor of halves, so high bits still matter)."""
    return (seed ^ (seed >> 32)) & _M32


@dataclass
class SamplerConfig:
    """The settings one draw needs (the runtime maps SamplingParams + step params onto this)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_last_n: int = 0
    seed: int = 0                 # the u32 the step params carry (fold_seed of the user's seed)
    logit_bias: Mapping[int, float] = field(default_factory=dict)


def apply_bias_and_penalties(logits: np.ndarray, cfg: SamplerConfig, recent: Sequence[int]) -> np.ndarray:
    """Steps 1-2 in f32 (a copy); ``recent`` is the sequence so far, the last penalty_last_n count."""
    l = np.array(logits, dtype=np.float32).reshape(-1)
    l[np.isnan(l)] = -np.inf                       # NaN is never drawn (the device sampler does the same)
    for tok, b in cfg.logit_bias.items():
        if 0 <= tok < l.size:
            l[tok] = np.float32(l[tok] + np.float32(b))
    window = list(recent)[-cfg.penalty_last_n:] if cfg.penalty_last_n > 0 else []
    toks, counts = np.unique(np.asarray([t for t in window if 0 <= t < l.size], np.int64),
                             return_counts=True)
    rp = np.float32(cfg.repeat_penalty)
    for tok, c in zip(toks.tolist(), counts.tolist()):
        v = l[tok]
        v = np.float32(v / rp) if v > 0 else np.float32(v * rp)
        l[tok] = np.float32(v - (np.float32(c) * np.float32(cfg.frequency_penalty)
                                 + np.float32(cfg.presence_penalty)))
    return l


def candidates(l: np.ndarray, top_k: int) -> np.ndarray:
    """Step 3: token ids by (logit desc, id asc), at most top_k (0: K_MAX).

    A partition finds the k-th key first, so only the tokens at or above it (ties included, so the
    lowest ids still win) are sorted: a few milliseconds on a 262k vocabulary instead of a full sort.
    """
    k = K_MAX if top_k <= 0 or top_k > K_MAX else top_k
    k = min(k, l.size)
    key = -l.astype(np.float64)                     # ascending key = descending logit; NaN sorts last
    pool = np.arange(l.size)
    if k < l.size:
        kth = np.partition(key, k - 1)[k - 1]
        if not np.isnan(kth):
            pool = np.flatnonzero(key <= kth)
    # lexsort: last key is primary; ids ascending break ties.
    return pool[np.lexsort((pool, key[pool]))][:k]


def scan(x: np.ndarray) -> np.ndarray:
    """Inclusive prefix sums in f32, Hillis-Steele order: step ``d`` adds element ``i - d`` to ``i``."""
    c = np.array(x, dtype=np.float32)
    off = 1
    while off < c.size:
        c[off:] = c[off:] + c[:-off]
        off *= 2
    return c


def sample(logits: np.ndarray, cfg: SamplerConfig, recent: Sequence[int] = (), counter: int = 0) -> int:
    """One token id from ``logits`` ([vocab] or [1, vocab]); see the module docstring for the chain."""
    l = apply_bias_and_penalties(logits, cfg, recent)
    cand = candidates(l, cfg.top_k)
    if l[cand[0]] == -np.inf:
        check_drawn(-1, l.size, counter)
    if cfg.temperature <= 0:
        return int(cand[0])
    cl = l[cand]
    lmax = cl[0]
    if not np.isfinite(lmax):
        return int(cand[0])
    n = cl.size
    if cfg.top_p < 1.0:
        cum = scan(np.exp(cl - lmax, dtype=np.float32))
        n = int(np.argmax(cum >= np.float32(cfg.top_p) * cum[-1])) + 1
    if cfg.min_p > 0.0:
        keep = np.exp(cl[:n] - lmax, dtype=np.float32) >= np.float32(cfg.min_p)
        n = max(1, int(np.count_nonzero(keep)))
    cum = scan(np.exp((cl[:n] - lmax) / np.float32(cfg.temperature), dtype=np.float32))
    target = np.float32(uniform(cfg.seed, counter)) * cum[-1]
    i = int(np.argmax(cum > target if cum[-1] > target else cum >= cum[-1]))
    return int(cand[i])


def check_drawn(token: int, vocab_size: int, counter: int) -> int:
    """`token` if it is a vocabulary id; else (the device sampler's -1: nothing could be drawn) a
    NumericalError naming the step."""
    if 0 <= token < vocab_size:
        return token
    raise NumericalError(f"no token can be sampled at generated token {counter}: every logit is NaN or -inf "
                         f"(the model's weights are broken or its activations overflowed)")
