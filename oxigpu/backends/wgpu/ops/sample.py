"""sample: logits [S, vocab] -> one token id per slot on the device (shaders/sample.wgsl).

The sampler's semantics and the layout of a slot's settings belong to the runtime (``runtime/sampling.py``,
whose numpy twin draws the same tokens): this kernel takes them as attributes -- ``slot_struct`` (the WGSL
declaration of a slot), ``k`` (candidates), ``ch`` (logits per first-round workgroup), ``n_logprobs``
(alternatives per logprob row), ``mirostat_m``, ``xtc_stream`` -- and ``greedy`` (K = 1: for slots that
all take their best token and ask for nothing else).

Inputs: logits f32[S, V]; slots (i32 words)[S, slot words] (state: the sampler advances each slot's
history length, RNG counter and mirostat mu); history rings i32[S, CAP] (written: the drawn token);
sparse entries (i32 pairs: id, f32 bits)[S, NB, 2] (logit biases, then DRY penalties); the constraint
bitmask (u32 words)[S, W >= ceil(V / 32)]; logprob rows [S, LPR, 1 + n_logprobs, 2] (written: (id,
logprob bits) of the chosen token then the top alternatives, at row ``counter % LPR``). Output: token ids
i32[S] (the next decode step's ``tokens``).

The top-K candidates come from rounds of bitonic sorts of CH entries in workgroup memory: the first round
over the vocabulary, later rounds over the previous round's K-lists, until one list per slot remains
(262,144 logits: 128 -> 16 -> 2 -> 1 workgroups per slot), then ``finish``. Greedy: the sorts become
max-reductions and the last round records the token (2 dispatches for any vocabulary over CH, 1 below).
"""
from __future__ import annotations

from ..device import Binding, Dispatch
from ..kernel import OpKernel, register


@register
class Sample(OpKernel):
    op = "sample"
    writes = (1, 2, 5)

    @classmethod
    def output_shapes(cls, in_shapes, attrs):
        return [(in_shapes[0][0],)]

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        a = self.attrs
        S, V = self.in_shapes[0]
        CAP, NB, W = self.in_shapes[2][1], self.in_shapes[3][1], self.in_shapes[4][1]
        LPR, NLP = self.in_shapes[5][1], self.in_shapes[5][2] - 1
        greedy = bool(a.get("greedy"))
        K = 1 if greedy else int(a["k"])
        # a vocabulary under one chunk sorts in the next power of two (>= K): fewer threads, same order
        CH = min(int(a["ch"]), max(K, 64, 1 << (V - 1).bit_length()))
        nch = -(-V // CH)
        if W * 32 < V:
            raise ValueError(f"sample: a mask row of {W} words covers {W * 32} tokens, the vocabulary has {V}")
        if not greedy and nch > K:
            raise ValueError(f"sample: {V} logits need {nch} first-round workgroups, at most {K} (k)")
        if NLP != int(a["n_logprobs"]):
            raise ValueError(f"sample: logprob rows hold {NLP} alternatives, the sampler reports {a['n_logprobs']}")
        base = {"V": V, "CH": CH, "K": K, "CAP": CAP, "NB": NB, "W": W, "NCH": nch, "LPR": LPR, "NLP": NLP,
                "MIRO_M": int(a["mirostat_m"]), "XTC_STREAM": int(a["xtc_stream"]), "SLOT_STRUCT": a["slot_struct"],
                "FINAL": False, "G": nch, "N_IN": 1, "WG": min(1024, CH // 2)}
        rounds = [("select_first", 1, nch)]     # (entry, entries in per slot, workgroups per slot)
        n = nch * K
        while rounds[-1][2] > 1:
            rounds.append(("select_merge", n, -(-n // CH)))
            n = rounds[-1][2] * K
        self.slots = S
        self.rounds = [(self.dev.pipeline("sample.wgsl", entry, dict(
            base, N_IN=n_in, G=groups, FINAL=greedy and i == len(rounds) - 1)), groups)
            for i, (entry, n_in, groups) in enumerate(rounds)]
        self.finish = None if greedy else self.dev.pipeline("sample.wgsl", "finish", dict(base, N_IN=K, G=1))
        size = S * nch * K * 8
        self.scratch = [self.dev.create_buffer(size, label="sample.cand0"),
                        self.dev.create_buffer(size, label="sample.cand1")]
        self.stats = self.dev.create_buffer(S * nch * 32, label="sample.stats")

    def encode(self, buffers: list[Binding]) -> list[Dispatch]:
        logits, slots, hist, sparse, mask, lp, token = buffers
        out = []
        for i, (pipe, groups) in enumerate(self.rounds):
            # every round's shader names the list out and the token/ring/state (write_top), whichever it writes
            binds = {2: slots, 3: hist, 7: self.scratch[i % 2], 8: token}
            if i == 0:
                binds.update({1: logits, 4: sparse, 5: mask, 9: self.stats})
            else:
                binds[6] = self.scratch[(i - 1) % 2]
            out.append(Dispatch(pipe, self.dev.bind_group(pipe, binds), (groups, self.slots, 1)))
        if self.finish is None:
            return out
        last = self.scratch[(len(self.rounds) - 1) % 2]
        bg = self.dev.bind_group(self.finish, {2: slots, 3: hist, 6: last, 8: token, 9: self.stats, 10: lp})
        out.append(Dispatch(self.finish, bg, (1, self.slots, 1)))
        return out
