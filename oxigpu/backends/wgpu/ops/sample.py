"""sample: logits [1, vocab] -> next token id on the device, drawing exactly what
``oxigpu.runtime.sampling.sample`` draws (see shaders/sample.wgsl and that module's docstring).

Inputs: logits f32[1, V], the step's ids i32[T], the history ring i32[CAP] (state, written: this step's
ids and the drawn token), logit-bias ids i32[NB] (unique; -1 = unused) and values f32[NB]. Output: the
token id as i32 bits in a one-element buffer (the next decode step's ``ids``). Settings come from the
step params (temperature, top_k, top_p, min_p, penalties, penalty_last_n, seed, counter).

The top-K candidates come from rounds of bitonic sorts of CH entries in workgroup memory: the first
round over the vocabulary (with bias and penalties applied on the fly), later rounds over the previous
round's K-lists, until one list remains (262,144 logits: 128 -> 16 -> 2 -> 1 workgroups). Attr ``greedy``
(for temperature 0 only): K = 1, the sorts become max-reductions and the rounds 128 -> 1 workgroups, the
last of which records the token (no ``finish``: 2 dispatches for any vocabulary over CH, 1 below), the
same token as the full sampler at temperature 0."""
from __future__ import annotations

from typing import Iterable

import numpy as np

from ....runtime import sampling
from ..device import Binding, Dispatch
from ..kernel import Case, OpKernel, check, register
from ._common import rng

CH = 2048


@register
class Sample(OpKernel):
    op = "sample"

    @classmethod
    def output_shapes(cls, in_shapes, attrs):
        return [(1,)]

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        V = self.in_shapes[0][-1]
        greedy = bool(self.attrs.get("greedy"))
        K = 1 if greedy else sampling.K_MAX   # greedy: only the best token is needed
        base = {"V": V, "CH": CH, "K": K, "K_MAX": K, "T": self.in_shapes[1][0],
                "CAP": self.in_shapes[2][0], "NB": self.in_shapes[3][0], "N_IN": 1, "FINAL": False}
        rounds = [("select_first", 1, -(-V // CH))]     # (entry, entries in, workgroups)
        n = rounds[0][2] * K
        while rounds[-1][2] > 1:
            rounds.append(("select_merge", n, -(-n // CH)))
            n = rounds[-1][2] * K
        self.rounds = [(self.dev.pipeline("sample.wgsl", entry, dict(base, N_IN=n_in, FINAL=greedy and i == len(rounds) - 1)),
                        groups) for i, (entry, n_in, groups) in enumerate(rounds)]
        self.finish = None if greedy else self.dev.pipeline("sample.wgsl", "finish", base)
        size = self.rounds[0][1] * K * 8
        self.scratch = [self.dev.create_buffer(size, label="sample.cand0"),
                        self.dev.create_buffer(size, label="sample.cand1")]

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        logits, ids, hist, bias_ids, bias_vals, token = buffers
        P = self.dev.params_buffer
        out = []
        for i, (pipe, groups) in enumerate(self.rounds):
            # every round's shader names the list out and the token/ring (write_top), whichever it writes
            binds = {0: P, 2: ids, 3: hist, 7: self.scratch[i % 2], 8: token}
            if i == 0:
                binds.update({1: logits, 4: bias_ids, 5: bias_vals})
            else:
                binds[6] = self.scratch[(i - 1) % 2]
            out.append(Dispatch(pipe, self.dev.bind_group(pipe, binds), (groups, 1, 1)))
        if self.finish is None:
            return out
        last = self.scratch[(len(self.rounds) - 1) % 2]
        bg = self.dev.bind_group(self.finish, {0: P, 2: ids, 3: hist, 6: last, 8: token})
        out.append(Dispatch(self.finish, bg, (1, 1, 1)))
        return out


def sample_inputs(vocab: int, T: int, cap: int, bias: dict[int, float], history: list[int], pos: int,
                  seed: int) -> list[np.ndarray]:
    """Logits with exact ties and a spread of magnitudes, the ids, the ring filled from ``history``."""
    g = rng(seed)
    logits = (g.standard_normal((1, vocab)) * 3).astype(np.float32)
    logits[0, g.integers(0, vocab, 8)] = logits.max()          # ties at the top
    ids = np.asarray(history[pos:pos + T] + [0] * (T - len(history[pos:pos + T])), np.int32)
    hist = np.full(cap, -1, np.int32)
    for p in range(max(0, pos - cap), pos):
        hist[p % cap] = history[p]
    nb = max(1, len(bias))
    bias_ids = np.full(nb, -1, np.int32)
    bias_vals = np.zeros(nb, np.float32)
    for i, (t, b) in enumerate(bias.items()):
        bias_ids[i], bias_vals[i] = t, b
    return [logits, ids, hist, bias_ids, bias_vals]


def expected(inputs: list[np.ndarray], cfg: sampling.SamplerConfig, history: list[int], pos: int,
             n_tokens: int, counter: int) -> list[np.ndarray]:
    """The numpy sampler's token and the ring after the step, as the f32 views run_op reads back."""
    tok = sampling.sample(inputs[0], cfg, history[:pos + n_tokens], counter)
    hist = inputs[2].copy()
    cap = hist.size
    for p in range(pos, pos + n_tokens):
        hist[p % cap] = history[p]
    hist[(pos + n_tokens) % cap] = tok
    return [np.array([tok], np.int32).view(np.float32), hist.view(np.float32)]


@check("sample")
def _cases() -> Iterable[Case]:
    """Runs under the default step params (temperature 1, top_k 0 = K_MAX, seed 0, counter 0, no
    penalties): a full-vocabulary draw that must equal the numpy draw bit for bit (tolerance 0). Ids come
    back as f32 views, so the ring is kept full (pos >= CAP): an empty slot (-1) would read as NaN."""
    yield from _sample_cases([(1000, 1, 1, 20), (151936, 4, 3, 19), (262144, 1, 1, 40)])
    # logit biases at the f32 limits (ties at the top, an overflow to -inf in l - l_max) and +inf, which
    # the API rejects but the kernel must still take greedily, as numpy does
    big = [{7: 3e38, 9: 3e38}, {7: 3.4028e38, 900: -3.4028e38}, {5: 1e38, 6: 1e38, 8: 1e38}, {7: np.inf}]
    yield from _sample_cases([(1000, 1, 1, 20)] * len(big), big)
    # the greedy variant: the numpy sampler's temperature-0 token (ties at the top: lowest id; NaN last)
    greedy = [(1000, 1, 1, 20), (151936, 4, 3, 19), (262144, 1, 1, 40), (1000, 1, 1, 20), (1000, 1, 1, 20),
              (5000, 1, 1, 20)]
    yield from _sample_cases(greedy, [{}, {}, {}, {7: 3e38, 9: 3e38}, {7: np.inf}, {}], greedy=True,
                             nan_at=[(), (), (), (), (), (0, 1, 4999)])


@check("sample.bench", bench=True)
def _bench() -> Iterable[Case]:
    """Decode-step sampling at gemma3's 262,144 and qwen's 151,936 vocabularies (GB/s of logits read)."""
    yield from _sample_cases([(262144, 1, 1, 100), (151936, 1, 1, 100)])
    yield from _sample_cases([(262144, 1, 1, 100), (151936, 1, 1, 100)], greedy=True)


def _sample_cases(shapes: list[tuple[int, int, int, int]], biases: list[dict[int, float]] | None = None,
                  greedy: bool = False, nan_at: list[tuple[int, ...]] | None = None) -> Iterable[Case]:
    """(vocab, T, n_tokens, pos) cases under the default step params, with the logit biases given;
    ``greedy``: the K = 1 variant against the numpy sampler at temperature 0; ``nan_at``: NaN logits."""
    for (vocab, T, n_tok, pos), bias, nans in zip(shapes, biases or [{}] * len(shapes),
                                                   nan_at or [()] * len(shapes)):
        cfg = sampling.SamplerConfig(temperature=0.0 if greedy else 1.0, logit_bias=bias)
        history = list(rng(vocab).integers(0, vocab, pos + T))
        ins = sample_inputs(vocab, T, 16, bias, history, pos, seed=vocab)
        ins[0][0, list(nans)] = np.nan
        name = f"sample{' greedy' if greedy else ''} vocab={vocab} T={T} n_tokens={n_tok}" + \
            (f" bias={bias}" if bias else "") + (f" NaN at {nans}" if nans else "")
        yield Case("sample", name, ins, ["f32", "i32", "i32", "i32", "f32"],
                   lambda ins=ins, h=history, pos=pos, n=n_tok, cfg=cfg: expected(ins, cfg, h, pos, n, 0), 0.0,
                   attrs={"greedy": True} if greedy else {}, pos=pos, n_tokens=n_tok, nbytes=4 * vocab)
