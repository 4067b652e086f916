"""The token sampler: the numpy twin of ``shaders/sample.wgsl``, the RNG both share, and the per-slot settings
layout the GPU sampler reads (owned here, by the runtime: the device layer only uploads the bytes).

Both backends must draw the same token for the same (logits, settings, seed, counter), so every choice below
is made to be reproducible on a GPU without float64 or 64-bit integers.

**The chain** (llama.cpp's sampler set, in its default order; every stage off by default but temperature):

1. constraint mask (structured output): tokens whose bit is clear become -inf; NaN logits become -inf;
2. logit bias: ``l[tok] += bias`` (a -inf bias bans a token);
3. penalties over the last ``penalty_last_n`` tokens of the sequence (prompt included), llama.cpp's rule:
   for each distinct token with ``c`` occurrences, ``l = l / repeat if l > 0 else l * repeat``, then
   ``l -= c * frequency + presence``;
4. DRY: ``l[tok] -= penalty`` for the tokens that would extend a repetition (computed on the host from the
   sequence, :func:`dry_penalties`, and handed to the GPU as a sparse list);
5. candidates: the tokens sorted by (logit descending, id ascending) -- a strict total order, so ties go
   to the lowest id on every backend -- at most :data:`K_MAX` of them (the GPU cannot sort a 262k
   vocabulary each token, so the cap is part of the semantics); tokens at -inf leave the set;
6. top-n-sigma: keep ``l >= l_max - n * std``, std over every finite logit of the vocabulary;
7. top-k (0: the K_MAX cap); 8. typical-p; 9. top-p; 10. min-p (``exp(l - l_max) >= min_p``);
11. XTC: with probability ``xtc_probability`` drop every candidate of probability >= ``xtc_threshold`` but
    the least likely of them;
12. temperature (dynamic temperature when ``dynatemp_range > 0``: ``t`` from the entropy of what is left);
    ``t <= 0`` takes the first remaining candidate (greedy);
13. draw: ``u = uniform(seed, counter)``; the first candidate whose running weight ``exp((l - l_0) / t)``
    exceeds ``u * sum``.

Softmaxes (6-12) are over the remaining candidates at temperature 1, as llama.cpp's are (temperature
comes last). **Mirostat** (1 or 2) replaces 3-13 as in llama.cpp: bias, temperature, then mirostat's own
truncation and draw; its running target ``mu`` is per-sequence state that the sampler returns updated.

Running sums are Hillis-Steele inclusive scans in f32 (:func:`scan`), the order a GPU workgroup computes
them in, and the std of top-n-sigma is reduced in the GPU's tree order (:func:`vocab_std`), so both
backends add the same numbers in the same order. Float results (exp, log, division) can still differ by an
ulp between numpy and a GPU, so a draw can differ only when ``u`` or a filter threshold falls within ~1e-6
of a boundary: the chance per token is of that order.

**RNG**: ``uniform(seed, counter) = (pcg(pcg(seed) + counter) >> 8) * 2**-24`` with the PCG-RXS-M-XS hash
on u32 (Jarzynski & Olano 2020). Token ``i`` of a generation uses counter ``i``; XTC's coin uses the same
hash on ``seed ^ XTC_STREAM``. The seed is folded to 32 bits by :func:`fold_seed`.

**Non-finite logits**: NaN counts as -inf (never drawn); a +inf logit is taken as greedy takes its best. A
step where nothing is above -inf (every logit NaN or -inf after mask, bias and penalties: broken weights or
an overflow, or a constraint that allows nothing) raises :class:`~oxigpu.errors.NumericalError` naming the
step; the GPU sampler records -1 there, which :func:`check_drawn` turns into the same error. No id outside
the vocabulary is ever returned.

**Logprobs** are those of the distribution the truncation filters see: log-softmax over the whole
vocabulary of the logits after steps 1-4 (mask, bias, penalties, DRY), at temperature 1. The top-N are the
first N candidates of step 5.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import NumericalError

K_MAX = 256
"""Most candidates kept after the sort (top_k 0 means this many); the GPU sampler's K equals it."""
CH = 2048
"""Logits per workgroup of the GPU sampler's first round: the chunk the top-n-sigma statistics are
reduced over (:func:`vocab_std` follows the same tree)."""
N_LOGPROBS_MAX = 20
"""Most top alternatives a draw reports (OpenAI's limit)."""
MIROSTAT_M = 100
"""Mirostat v1 estimates its Zipf exponent from this many top candidates (llama.cpp's m)."""
XTC_STREAM = 0x9E3779B9
"""XTC's coin is ``uniform(seed ^ XTC_STREAM, counter)``: a stream apart from the draw's."""

_M32 = 0xFFFFFFFF
_F32 = np.float32
_NEG_INF = _F32(-np.inf)


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
    """A 64-bit user seed as the u32 the sampler carries (xor of halves, so high bits still matter)."""
    return (seed ^ (seed >> 32)) & _M32


@dataclass
class SamplerConfig:
    """The settings one draw needs (the runtime maps SamplingParams onto this; see the module docstring
    for what each does; SamplingParams documents and validates the ranges)."""

    temperature: float = 0.0
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    typical_p: float = 1.0
    top_n_sigma: float = 0.0      # <= 0: off
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_last_n: int = 0
    mirostat: int = 0             # 0 off, 1 or 2
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    seed: int = 0                 # the u32 the sampler carries (fold_seed of the user's seed)
    logit_bias: Mapping[int, float] = field(default_factory=dict)
    n_logprobs: int = -1          # -1: none; 0: the chosen token's; N: and the top N alternatives

    @property
    def greedy(self) -> bool:
        """Whether every draw is the first candidate and nothing else is asked (no logprobs, no state):
        what the GPU sampler's one-candidate variant computes. Temperature 0 alone is not enough, as in
        llama.cpp: typical-p and XTC may drop the best token first, dynamic temperature may rise above 0."""
        if self.temperature > 0 or self.n_logprobs >= 0:
            return False
        return bool(self.mirostat) or (self.dynatemp_range <= 0 and self.typical_p >= 1
                                       and (self.xtc_probability <= 0 or self.xtc_threshold > 0.5))


@dataclass(frozen=True)
class Draw:
    """One sampled token, with its log-probability and the top alternatives when asked, and mirostat's
    updated ``mu``."""

    token: int
    logprob: float | None = None
    top: tuple[tuple[int, float], ...] = ()
    mu: float = 0.0


# -- the slot layout the GPU sampler reads ------------------------------------------------------------

SLOT_FIELDS: tuple[tuple[str, str], ...] = (
    # state the sampler advances after each draw
    ("n_hist", "u32"),            # tokens of the sequence so far; the next one lands at this position
    ("counter", "u32"),           # RNG counter of the next draw
    ("mu", "f32"),                # mirostat's running target
    # settings
    ("flags", "u32"),             # SLOT_ACTIVE | SLOT_MASK
    ("seed", "u32"),
    ("top_k", "u32"),
    ("penalty_last_n", "u32"),
    ("n_bias", "u32"),            # sparse entries [0, n_bias): logit biases (added before the penalties)
    ("n_adjust", "u32"),          # [n_bias, n_bias + n_adjust): DRY penalties (subtracted after them)
    ("n_logprobs", "i32"),        # -1 none, else the top alternatives to report (<= N_LOGPROBS_MAX)
    ("mirostat", "u32"),
    ("temperature", "f32"),
    ("dynatemp_range", "f32"),
    ("dynatemp_exponent", "f32"),
    ("top_p", "f32"),
    ("min_p", "f32"),
    ("typical_p", "f32"),
    ("top_n_sigma", "f32"),
    ("xtc_probability", "f32"),
    ("xtc_threshold", "f32"),
    ("repeat_penalty", "f32"),
    ("presence_penalty", "f32"),
    ("frequency_penalty", "f32"),
    ("mirostat_tau", "f32"),
    ("mirostat_eta", "f32"),
)
"""One slot of the GPU sampler's settings buffer: 4-byte fields in this order (:data:`SLOT_WGSL`)."""
SLOT_WORDS = len(SLOT_FIELDS)
SLOT_ACTIVE = 1
"""flags: this slot holds a sequence (padding slots of a batch are skipped)."""
SLOT_MASK = 2
"""flags: apply this slot's row of the constraint bitmask."""
SLOT_WGSL = ("struct Slot {\n" + "".join(f"  {n}: {t},\n" for n, t in SLOT_FIELDS) + "}\n"
             f"const SLOT_ACTIVE: u32 = {SLOT_ACTIVE}u;\nconst SLOT_MASK: u32 = {SLOT_MASK}u;\n")
"""The WGSL declaration of :data:`SLOT_FIELDS`, handed to the sampler kernel (it declares no layout)."""
_SLOT_INDEX = {n: i for i, (n, _) in enumerate(SLOT_FIELDS)}


def pack_slot(cfg: SamplerConfig, n_hist: int, counter: int, mu: float = 0.0, mask: bool = False,
              n_bias: int = 0, n_adjust: int = 0, active: bool = True) -> np.ndarray:
    """One slot's words (uint32 [SLOT_WORDS]) for ``cfg`` at that point of its sequence."""
    values = {
        "n_hist": n_hist, "counter": counter & _M32, "mu": mu,
        "flags": (SLOT_ACTIVE if active else 0) | (SLOT_MASK if mask else 0),
        "seed": cfg.seed & _M32, "top_k": min(max(cfg.top_k, 0), _M32),
        "penalty_last_n": 0 if cfg.mirostat else min(max(cfg.penalty_last_n, 0), _M32),
        "n_bias": n_bias, "n_adjust": n_adjust, "n_logprobs": min(cfg.n_logprobs, N_LOGPROBS_MAX),
        "mirostat": cfg.mirostat,
    }
    words = np.zeros(SLOT_WORDS, np.uint32)
    for name, kind in SLOT_FIELDS:
        v = values[name] if name in values else getattr(cfg, name)
        words[_SLOT_INDEX[name]] = (np.array([v], np.float32).view(np.uint32)[0] if kind == "f32" else
                                    np.array([v], np.int64).astype(np.uint32)[0])
    return words


def slot_value(words: np.ndarray, name: str) -> float | int:
    """A field of a packed slot (e.g. the ``mu`` or ``counter`` the GPU sampler left)."""
    w = np.asarray(words, np.uint32)[..., _SLOT_INDEX[name]]
    kind = SLOT_FIELDS[_SLOT_INDEX[name]][1]
    return float(w.view(np.float32)) if kind == "f32" else int(w.view(np.int32) if kind == "i32" else w)


def sparse_entries(cfg: SamplerConfig, adjust: Mapping[int, float] | None = None) -> np.ndarray:
    """A slot's sparse list (uint32 [n, 2]: id, f32 bits): its logit biases, then its DRY penalties."""
    items = [*cfg.logit_bias.items(), *(adjust or {}).items()]
    out = np.zeros((len(items), 2), np.uint32)
    for i, (t, v) in enumerate(items):
        out[i, 0] = t
        out[i, 1] = np.array([v], np.float32).view(np.uint32)[0]
    return out


# -- the chain ----------------------------------------------------------------------------------------

def mask_allows(mask: np.ndarray, vocab: int) -> np.ndarray:
    """A bool [vocab] from a constraint bitmask (u32 words, bit t % 32 of word t // 32 set = allowed)."""
    bits = np.unpackbits(np.ascontiguousarray(mask, np.uint32).view(np.uint8), bitorder="little")
    allowed = np.zeros(vocab, bool)
    n = min(vocab, bits.size)
    allowed[:n] = bits[:n].astype(bool)
    return allowed


def processed_logits(logits: np.ndarray, cfg: SamplerConfig, recent: Sequence[int] = (),
                     mask: np.ndarray | None = None, adjust: Mapping[int, float] | None = None) -> np.ndarray:
    """Steps 1-4 in f32 (a copy): mask, bias, penalties (not under mirostat), DRY."""
    l = np.array(logits, dtype=np.float32).reshape(-1)
    l[np.isnan(l)] = _NEG_INF
    if mask is not None:
        l[~mask_allows(mask, l.size)] = _NEG_INF
    for tok, b in cfg.logit_bias.items():
        if 0 <= tok < l.size:
            l[tok] = _F32(l[tok] + _F32(b))
    if not cfg.mirostat:
        window = list(recent)[-cfg.penalty_last_n:] if cfg.penalty_last_n > 0 else []
        toks, counts = np.unique(np.asarray([t for t in window if 0 <= t < l.size], np.int64),
                                 return_counts=True)
        rp = _F32(cfg.repeat_penalty)
        for tok, c in zip(toks.tolist(), counts.tolist()):
            v = l[tok]
            v = _F32(v / rp) if v > 0 else _F32(v * rp)
            l[tok] = _F32(v - (_F32(c) * _F32(cfg.frequency_penalty) + _F32(cfg.presence_penalty)))
    for tok, a in (adjust or {}).items():
        if 0 <= tok < l.size:
            l[tok] = _F32(l[tok] - _F32(a))
    return l


def apply_bias_and_penalties(logits: np.ndarray, cfg: SamplerConfig, recent: Sequence[int]) -> np.ndarray:
    """Steps 2-3 (with NaN to -inf): :func:`processed_logits` without mask or DRY."""
    return processed_logits(logits, cfg, recent)


def candidates(l: np.ndarray, top_k: int = 0) -> np.ndarray:
    """Step 5: token ids by (logit desc, id asc), at most top_k (0: K_MAX).

    A partition finds the k-th key first, so only the tokens at or above it (ties included, so the
    lowest ids still win) are sorted: a few milliseconds on a 262k vocabulary instead of a full sort.
    """
    k = K_MAX if top_k <= 0 or top_k > K_MAX else top_k
    k = min(k, l.size)
    key = -l.astype(np.float64)                     # ascending key = descending logit
    key[np.isnan(key)] = np.inf
    pool = np.arange(l.size)
    if k < l.size:
        kth = np.partition(key, k - 1)[k - 1]
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


def tree_sum(x: np.ndarray) -> np.ndarray:
    """Sums over the last axis (a power of two) in a workgroup's tree order: halves added pairwise."""
    x = np.asarray(x, np.float32)
    while x.shape[-1] > 1:
        h = x.shape[-1] // 2
        x = x[..., :h] + x[..., h:]
    return x[..., 0]


def vocab_std(l: np.ndarray) -> float:
    """The std of the finite logits of ``l`` as the GPU sampler reduces it: per chunk of :data:`CH`
    (count, mean, M2) by tree sums, then the chunks merged pairwise in a tree of :data:`K_MAX` leaves
    (Chan's formula), all in f32."""
    nch = -(-l.size // CH)
    x = np.full(nch * CH, _NEG_INF, np.float32)
    x[:l.size] = l
    x = x.reshape(nch, CH)
    fin = np.isfinite(x)
    cnt = tree_sum(fin.astype(np.float32))
    mean = np.where(cnt > 0, tree_sum(np.where(fin, x, _F32(0))) / np.maximum(cnt, _F32(1)), _F32(0))
    d = np.where(fin, x - mean[:, None], _F32(0)).astype(np.float32)
    m2 = tree_sum(d * d)
    size = max(K_MAX, 1 << (nch - 1).bit_length())
    n, mu, q = (np.zeros(size, np.float32) for _ in range(3))
    n[:nch], mu[:nch], q[:nch] = cnt, mean, m2
    while n.size > 1:
        h = n.size // 2
        na, nb, ma, mb, qa, qb = n[:h], n[h:], mu[:h], mu[h:], q[:h], q[h:]
        nn = na + nb
        safe = np.where(nn > 0, nn, _F32(1))
        dd = mb - ma
        mu = np.where(nn > 0, ma + dd * (nb / safe), _F32(0)).astype(np.float32)
        q = np.where(nn > 0, qa + qb + (dd * dd) * ((na * nb) / safe), _F32(0)).astype(np.float32)
        n = nn
    return float(np.sqrt(q[0] / n[0])) if n[0] > 0 else 0.0


def _first(mask: np.ndarray, none: int) -> int:
    """Index of the first True, else ``none``."""
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else none


def _softmax(cl: np.ndarray, n: int) -> np.ndarray:
    """Probabilities of the first n candidates at temperature 1 (f32, scan-summed)."""
    e = np.exp(cl[:n] - cl[0], dtype=np.float32)
    return (e / scan(e)[n - 1]).astype(np.float32)


def _weighted_draw(cl: np.ndarray, n: int, t: np.float32, u: float) -> tuple[int, np.ndarray]:
    """Step 13 over the first n candidates: (index drawn, the scanned weights)."""
    cum = scan(np.exp((cl[:n] - cl[0]) / t, dtype=np.float32))
    target = _F32(u) * cum[n - 1]
    return (_first(cum > target, n - 1) if cum[n - 1] > target else n - 1), cum


def draw(logits: np.ndarray, cfg: SamplerConfig, recent: Sequence[int] = (), counter: int = 0,
         mask: np.ndarray | None = None, mu: float = 0.0, adjust: Mapping[int, float] | None = None) -> Draw:
    """One draw from ``logits`` ([vocab] or [1, vocab]); see the module docstring for the chain.

    ``recent``: the sequence so far (penalties); ``counter``: the RNG counter (token index); ``mask``: a
    constraint bitmask; ``mu``: mirostat's state; ``adjust``: DRY's penalties (:func:`dry_penalties`)."""
    l = processed_logits(logits, cfg, recent, mask, adjust)
    cand = candidates(l, K_MAX)
    cl, ids = l[cand], cand
    lmax = cl[0]
    if lmax == _NEG_INF:   # nothing to draw (the GPU sampler records -1): see check_drawn
        check_drawn(-1, l.size, counter)
    n = max(1, int(np.count_nonzero(cl > _NEG_INF)))
    chosen, new_mu = 0, _F32(mu)
    if np.isfinite(lmax) and not cfg.greedy:
        u = uniform(cfg.seed, counter)
        if not cfg.mirostat:
            cl, ids, chosen = _chain(cl[:n], ids[:n], cfg, l, counter, u)
        elif cfg.temperature > 0:
            chosen, new_mu = _mirostat(cl[:n], cfg, _F32(mu), l.size, u)
    logprob, top = None, ()
    if cfg.n_logprobs >= 0:
        fin = l[np.isfinite(l)].astype(np.float64)
        lse = fin.max() + math.log(np.exp(fin - fin.max()).sum()) if fin.size else -math.inf
        logprob = float(cl[chosen]) - lse
        top = tuple((int(cand[i]), float(l[cand[i]]) - lse)
                    for i in range(min(cfg.n_logprobs, N_LOGPROBS_MAX, cand.size)))
    return Draw(int(ids[chosen]), logprob, top, float(new_mu))


def _chain(cl: np.ndarray, ids: np.ndarray, cfg: SamplerConfig, l: np.ndarray, counter: int, u: float
           ) -> tuple[np.ndarray, np.ndarray, int]:
    """Steps 6-13 over the n finite candidates ``cl`` (logits) / ``ids``: the list as it ends (after
    typical-p's reordering) and the index drawn in it."""
    cl, ids, t = _truncate(cl, ids, cfg, l, counter)
    if t <= 0:
        return cl, ids, 0
    return cl, ids, _weighted_draw(cl, cl.size, t, u)[0]


def _truncate(cl: np.ndarray, ids: np.ndarray, cfg: SamplerConfig, l: np.ndarray, counter: int
              ) -> tuple[np.ndarray, np.ndarray, np.float32]:
    """Steps 6-12: the candidates left (logits, ids) and the temperature step 13 draws them at."""
    n = cl.size
    if cfg.top_n_sigma > 0:
        thr = cl[0] - _F32(cfg.top_n_sigma) * _F32(vocab_std(l))
        n = max(1, int(np.count_nonzero(cl[:n] >= thr)))
    if 0 < cfg.top_k < n:
        n = cfg.top_k
    if cfg.typical_p < 1:
        p = _softmax(cl, n)
        terms = np.where(p > 0, -p * np.log(np.where(p > 0, p, _F32(1))), _F32(0)).astype(np.float32)
        ent = scan(terms)[n - 1]
        with np.errstate(divide="ignore"):
            score = np.abs(-np.log(p) - ent).astype(np.float32)
        order = np.lexsort((np.arange(n), score))
        cum = scan(p[order])
        last = _first(cum > _F32(cfg.typical_p), n - 1) + 1
        keep = np.sort(order[:last])
        cl, ids, n = cl[keep], ids[keep], last
    if cfg.top_p < 1:
        cum = scan(np.exp(cl[:n] - cl[0], dtype=np.float32))
        n = _first(cum >= _F32(cfg.top_p) * cum[n - 1], n - 1) + 1
    if cfg.min_p > 0:
        n = max(1, int(np.count_nonzero(np.exp(cl[:n] - cl[0], dtype=np.float32) >= _F32(cfg.min_p))))
    off = 0
    if cfg.xtc_probability > 0 and cfg.xtc_threshold <= 0.5 and n >= 2:
        if _F32(uniform(cfg.seed ^ XTC_STREAM, counter)) <= _F32(cfg.xtc_probability):
            p = _softmax(cl, n)
            pos_last = int(np.count_nonzero(p >= _F32(cfg.xtc_threshold))) - 1
            if pos_last > 0:
                off, n = pos_last, n - pos_last
    cl, ids = cl[off:off + n], ids[off:off + n]
    t = _F32(cfg.temperature)
    if cfg.dynatemp_range > 0 and n > 1:
        lo = max(_F32(0), _F32(cfg.temperature) - _F32(cfg.dynatemp_range))
        hi = _F32(cfg.temperature) + _F32(cfg.dynatemp_range)
        p = _softmax(cl, n)
        terms = np.where(p > 0, -p * np.log(np.where(p > 0, p, _F32(1))), _F32(0)).astype(np.float32)
        norm = scan(terms)[n - 1] / np.log(_F32(n))
        powed = np.exp2(_F32(cfg.dynatemp_exponent) * np.log2(norm)) if norm > 0 else _F32(0)
        t = _F32(lo + (hi - lo) * _F32(powed))
    return cl, ids, t


def distribution(logits: np.ndarray, cfg: SamplerConfig, recent: Sequence[int] = (), counter: int = 0,
                 mask: np.ndarray | None = None, adjust: Mapping[int, float] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The distribution :func:`draw` samples from, as (token ids, probabilities in float64): the tokens the
    chain leaves and their weights at its temperature; one token at probability 1 where the draw is
    greedy. What speculative decoding compares a draft with (``runtime/speculative.py``). Mirostat's
    truncation depends on its running state and is not covered (ValueError)."""
    if cfg.mirostat:
        raise ValueError("mirostat's distribution depends on its running state")
    l = processed_logits(logits, cfg, recent, mask, adjust)
    cand = candidates(l, K_MAX)
    cl = l[cand]
    if cl[0] == _NEG_INF:
        check_drawn(-1, l.size, counter)
    n = max(1, int(np.count_nonzero(cl > _NEG_INF)))
    if not np.isfinite(cl[0]) or cfg.greedy:
        return cand[:1], np.ones(1)
    cl, ids, t = _truncate(cl[:n], cand[:n], cfg, l, counter)
    if t <= 0:
        return ids[:1], np.ones(1)
    w = np.exp((cl.astype(np.float64) - float(cl[0])) / float(t))
    return ids, w / w.sum()


def _mirostat(cl: np.ndarray, cfg: SamplerConfig, mu: np.float32, n_vocab: int, u: float
              ) -> tuple[int, np.float32]:
    """Mirostat v1/v2 over the finite candidates (temperature > 0): (index drawn, updated mu)."""
    n = cl.size
    t = _F32(cfg.temperature)
    e = np.exp((cl - cl[0]) / t, dtype=np.float32)
    p = (e / scan(e)[n - 1]).astype(np.float32)
    if cfg.mirostat == 1:
        m = min(MIROSTAT_M - 1, n - 1)
        i = np.arange(m, dtype=np.float32)
        ti = np.log((i + _F32(2)) / (i + _F32(1)), dtype=np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            bi = np.log(p[:m] / p[1:m + 1], dtype=np.float32)
            s_hat = _F32(scan(ti * bi)[m - 1] / scan(ti * ti)[m - 1]) if m > 0 else _F32(np.nan)
            eps = s_hat - _F32(1)
            x = (eps * np.exp2(mu)) / (_F32(1) - np.exp2(-eps * np.log2(_F32(n_vocab))))
            k = np.exp2(np.log2(x) * (_F32(1) / s_hat))
        n = n if k >= n else int(k) if k >= 1 else 1      # NaN (one candidate): 1
    else:
        with np.errstate(divide="ignore"):
            n = max(1, _first(-np.log2(p[:n]) > mu, n))
    idx, cum = _weighted_draw(cl, n, t, u)
    surprise = -np.log2(e[idx] / cum[n - 1])
    return idx, _F32(mu - _F32(cfg.mirostat_eta) * _F32(surprise - _F32(cfg.mirostat_tau)))


def sample(logits: np.ndarray, cfg: SamplerConfig, recent: Sequence[int] = (), counter: int = 0,
           mask: np.ndarray | None = None) -> int:
    """The token id :func:`draw` draws (no mirostat state, no DRY)."""
    return draw(logits, cfg, recent, counter, mask).token


# -- DRY (host side: it reads the whole sequence) --------------------------------------------------------

@dataclass(frozen=True)
class DryConfig:
    """DRY ("don't repeat yourself", llama.cpp's semantics): a token that would extend a repetition of at
    least ``allowed_length`` tokens within the last ``penalty_last_n`` (-1: the whole context) is
    penalized by ``multiplier * base ** (length - allowed_length)``; ``breakers`` maps a token to the
    tails of the sequence breakers it starts (an empty tail: the token alone breaks), and repetitions do
    not reach across a breaker."""

    multiplier: float = 0.0
    base: float = 1.75
    allowed_length: int = 2
    penalty_last_n: int = -1
    breakers: Mapping[int, tuple[tuple[int, ...], ...]] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return self.multiplier != 0 and self.base >= 1 and self.penalty_last_n != 0


def _z_function(r: Sequence[int]) -> list[int]:
    """z[k]: the length of the longest common prefix of r and r[k:] (z[0] = 0)."""
    n = len(r)
    z = [0] * n
    lt = rt = 0
    for k in range(1, n):
        if k < rt:
            z[k] = min(rt - k, z[k - lt])
        while k + z[k] < n and r[z[k]] == r[k + z[k]]:
            z[k] += 1
        if k + z[k] > rt:
            lt, rt = k, k + z[k]
    return z


def dry_penalties(tokens: Sequence[int], dry: DryConfig, n_ctx: int) -> dict[int, float]:
    """DRY's penalty per token for the next draw after ``tokens`` (the sequence so far, prompt included):
    the amounts :func:`processed_logits` subtracts (as f32)."""
    if not dry.enabled:
        return {}
    last_n = n_ctx if dry.penalty_last_n == -1 else max(dry.penalty_last_n, 0)
    n = min(len(tokens), last_n, n_ctx)
    if n <= dry.allowed_length:
        return {}
    r = list(tokens[len(tokens) - n:])[::-1]      # r[i]: the token i places from the end
    rep_limit = n
    for i in range(n):
        tails = dry.breakers.get(r[i])
        if not tails:
            continue
        longest = -1
        for tail in tails:
            if longest < len(tail) <= i and all(tail[o] == r[i - o - 1] for o in range(len(tail))):
                longest = len(tail)
        if longest >= 0:
            rep_limit = i - longest
            break
    if rep_limit < dry.allowed_length:
        return {}
    z = _z_function(r)
    longest_after: dict[int, int] = {}
    for k in range(1, n):
        length = min(z[k], rep_limit)
        if length >= dry.allowed_length:
            tok = r[k - 1]                           # the token that followed that earlier occurrence
            longest_after[tok] = max(longest_after.get(tok, 0), length)
    max_exp = int(88.7228391 / math.log(dry.base)) if dry.base > 1.000001 else 0
    out = {}
    for tok, length in longest_after.items():
        if any(len(t) == 0 for t in dry.breakers.get(tok, ())):
            continue
        e = length - dry.allowed_length
        if max_exp > 0 and e > max_exp:
            e = max_exp
        out[tok] = float(np.float32(dry.multiplier * dry.base ** e))
    return out


def dry_breakers(pieces: Sequence[bytes], encode: Callable[[str], list[int]], breakers: Sequence[str],
                 max_chars: int = 40, max_tail: int = 20) -> dict[int, tuple[tuple[int, ...], ...]]:
    """Sequence-breaker strings as token sequences, llama.cpp's way: every token whose text contains a
    breaker breaks alone; a token whose text ends with the start of a breaker starts a sequence whose tail
    is the rest of the breaker, tokenized (at most ``max_tail`` tokens). ``pieces``: each token's bytes."""
    out: dict[int, list[tuple[int, ...]]] = {}
    for s in breakers:
        b = s.encode()[:max_chars]
        if not b:
            continue
        for tok, word in enumerate(pieces):
            if b in word:
                out.setdefault(tok, [])
                if () not in out[tok]:
                    out[tok].append(())
                continue
            pos = word.find(b[:1])
            while pos >= 0:
                rest = word[pos:]
                if b.startswith(rest):
                    tail = tuple(encode(b[len(rest):].decode("utf-8", "replace"))[:max_tail])
                    if tail not in out.setdefault(tok, []):
                        out[tok].append(tail)
                pos = word.find(b[:1], pos + 1)
    return {t: tuple(v) for t, v in out.items()}


DEVICE_SPEC: Mapping[str, object] = {
    "slot_struct": SLOT_WGSL, "k": K_MAX, "ch": CH, "n_logprobs": N_LOGPROBS_MAX, "mirostat_m": MIROSTAT_M,
    "xtc_stream": XTC_STREAM,
}
"""What the GPU sampler kernel needs to know of these semantics (its attributes, with ``greedy``)."""


@dataclass
class SlotBatch:
    """The GPU sampler's inputs for S sequences, packed by the runtime: a backend uploads these arrays as
    they are (it knows no layout) and builds its kernel from ``spec`` (+ ``greedy``)."""

    slots: np.ndarray                 # uint32 [S, SLOT_WORDS]
    sparse: np.ndarray                # uint32 [S, NB, 2], NB >= 1: biases then DRY penalties per slot
    mask: np.ndarray | None           # uint32 [S, W]: constraint bitmasks (None: no slot is constrained)
    greedy: bool                      # every slot takes its first candidate (the one-candidate variant)
    logprobs: bool                    # some slot reports logprobs
    counters: tuple[int, ...] = ()    # each slot's RNG counter (its logprob row is counter % rows)
    spec: Mapping[str, object] = field(default_factory=lambda: DEVICE_SPEC)


def pack_batch(cfgs: Sequence[SamplerConfig], n_hist: Sequence[int], counters: Sequence[int],
               mus: Sequence[float] | None = None, adjusts: Sequence[Mapping[int, float] | None] | None = None,
               masks: Sequence[np.ndarray | None] | None = None, vocab: int | None = None) -> SlotBatch:
    """Slot i: sequence of ``n_hist[i]`` tokens drawing its token ``counters[i]`` with ``cfgs[i]``."""
    S = len(cfgs)
    mus = mus or [0.0] * S
    adjusts = adjusts or [None] * S
    masks = masks or [None] * S
    entries = [sparse_entries(c, a) for c, a in zip(cfgs, adjusts)]
    nb = max(1, max(e.shape[0] for e in entries))
    sparse = np.zeros((S, nb, 2), np.uint32)
    for i, e in enumerate(entries):
        sparse[i, :e.shape[0]] = e
    mask = None
    if any(m is not None for m in masks):
        words = max(np.asarray(m).size for m in masks if m is not None)
        if vocab is not None:
            words = max(words, -(-vocab // 32))
        mask = np.full((S, words), 0xFFFFFFFF, np.uint32)
        for i, m in enumerate(masks):
            if m is not None:
                mask[i, :np.asarray(m).size] = np.asarray(m, np.uint32).reshape(-1)
    slots = np.stack([pack_slot(c, h, k, mu, m is not None, len(c.logit_bias), len(a or {}))
                      for c, h, k, mu, a, m in zip(cfgs, n_hist, counters, mus, adjusts, masks)])
    return SlotBatch(slots, sparse, mask, all(c.greedy for c in cfgs), any(c.n_logprobs >= 0 for c in cfgs),
                     tuple(int(k) for k in counters))


def check_drawn(token: int, vocab_size: int, counter: int) -> int:
    """`token` if it is a vocabulary id; else (the GPU sampler's -1: nothing could be drawn) a NumericalError
    naming the step."""
    if 0 <= token < vocab_size:
        return token
    raise NumericalError(f"no token can be sampled at generated token {counter}: every logit is NaN or -inf "
                         f"(the model's weights are broken or its activations overflowed, or a constraint "
                         f"allows no token)")
