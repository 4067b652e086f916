"""Embeddings: a text's final hidden states pooled into one vector, from an encoder or a decoder.

Encoders (bert, nomic-bert) see a whole text in one step: the graph is compiled for buckets of T rows
(powers of two up to the context) and a text runs in the smallest bucket that holds it. Decoders run the
text through their causal stack in prefill chunks from an empty cache, keeping every row's output-normed
hidden state. Pooling is on the host, identical for both backends: ``mean`` (over the text's tokens),
``cls`` (the first token) or ``last``; ``normalize`` scales each vector to unit L2 norm (what llama.cpp's
embedding tools and servers return by default).

An `Embedder` owns its backend: an encoder model's `LLM` holds one instead of a generation engine, and a
decoder `LLM` loads one on its first `embed` call (a second copy of the weights on the device).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..backends.base import Step
from ..errors import ContextLengthError, InvalidParameterError
from ..gguf import GGUFFile
from ..graph.plan import Plan
from ..graph.plan import compile as compile_plan
from ..models import HParams, build_graph
from ..tokenizer import Tokenizer
from .engine import Progress, _make_backend, resolve_n_ctx, select_backend

POOLINGS = ("mean", "cls", "last")
MIN_BUCKET = 16


class Embedder:
    """A model loaded for embeddings. Exposes the facts an `LLM` reports (tokenizer, n_ctx, backend_name,
    model_path, hparams, load_s, lock); generation entry points refuse with a clear error."""

    def __init__(self, model_path: str | Path, backend: str = "auto", n_ctx: int | None = None,
                 pooling: str | None = None, progress: Progress | None = None):
        t0 = time.perf_counter()
        report = progress or (lambda stage, done, total: None)
        self.backend_name = select_backend(backend)
        report("reading GGUF", 0, 3)
        self.model_path = Path(model_path)
        self.model = GGUFFile(self.model_path)
        self.hparams = HParams.from_gguf(self.model)
        self.encoder = self.hparams.family.encoder
        report("building tokenizer", 1, 3)
        self.tokenizer = Tokenizer.from_metadata(self.model.metadata)
        self.n_ctx = resolve_n_ctx(n_ctx, self.hparams.n_ctx_train)
        self.pooling = self._pooling(pooling)
        self.backend = _make_backend(self.backend_name, self.model, self.n_ctx)
        self.chunk = max(1, min(self.backend.prefill_chunk, self.n_ctx))
        self._plans: dict[int, Plan] = {}
        report("loading weights", 2, 3)
        self._plan(self._bucket(1))
        report("ready", 3, 3)
        self.lock = threading.RLock()
        self.load_s = time.perf_counter() - t0

    def _pooling(self, pooling: str | None) -> str:
        if pooling is None:
            pooling = self.hparams.pooling if self.hparams.pooling in POOLINGS else "last"
        if pooling not in POOLINGS:
            raise InvalidParameterError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
        return pooling

    @property
    def vocab_size(self) -> int:
        return self.hparams.n_vocab

    @property
    def dim(self) -> int:
        """Length of an embedding vector."""
        return self.hparams.n_embd

    def _bucket(self, n: int) -> int:
        """Rows of the plan a text of n tokens runs in: a power of two for encoders (one step holds the whole
        text), the prefill chunk for decoders."""
        if not self.encoder:
            return self.chunk
        T = MIN_BUCKET
        while T < n:
            T *= 2
        return min(T, self.n_ctx)

    def _plan(self, T: int) -> Plan:
        plan = self._plans.get(T)
        if plan is None:
            plan = self._plans[T] = compile_plan(build_graph(self.model, self.hparams, T, self.n_ctx, "hidden"))
            self.backend.load(plan)
        return plan

    # -- embedding ----------------------------------------------------------------------------------
    def embed_ids(self, ids: Sequence[int], pooling: str | None = None, normalize: bool = True) -> np.ndarray:
        """The pooled embedding [dim] (float32) of one token sequence."""
        pooling = self._pooling(pooling) if pooling is not None else self.pooling
        n = len(ids)
        if n == 0:
            raise InvalidParameterError("cannot embed an empty token sequence")
        if n > self.n_ctx:
            raise ContextLengthError(f"{n} tokens do not fit in the context of {self.n_ctx}; split the text")
        bad = [t for t in ids if not 0 <= int(t) < self.vocab_size]
        if bad:
            raise InvalidParameterError(f"token id {bad[0]} is outside the vocabulary (size {self.vocab_size})")
        with self.lock:
            rows = self._hidden(np.asarray(ids, np.int32))
        vec = rows.mean(axis=0) if pooling == "mean" else rows[0] if pooling == "cls" else rows[-1]
        vec = vec.astype(np.float32)
        if normalize:
            norm = float(np.sqrt(np.dot(vec.astype(np.float64), vec)))
            if norm > 0:
                vec /= np.float32(norm)
        return vec

    def _hidden(self, ids: np.ndarray) -> np.ndarray:
        """Every token's final hidden state [n, dim]."""
        n = len(ids)
        if self.encoder:
            out = self.backend.run(self._plan(self._bucket(n)), Step.single(ids, 0))["hidden"]
            return out[:n]
        self.backend.reset()
        plan, rows = self._plan(self.chunk), []
        for pos in range(0, n, self.chunk):
            m = min(self.chunk, n - pos)
            rows.append(self.backend.run(plan, Step.single(ids[pos:pos + m], pos))["hidden"][:m])
        return np.concatenate(rows)

    def embed(self, texts: str | Sequence[str | Sequence[int]], pooling: str | None = None,
              normalize: bool = True) -> np.ndarray:
        """Embeddings of ``texts`` [len(texts), dim] (one string: [dim]). Each item is a text, tokenized as a
        prompt (with the model's BOS/CLS and SEP), or a list of token ids used as given."""
        single = isinstance(texts, str)
        items = [texts] if single else texts
        if isinstance(items, (bytes, bytearray)) or not isinstance(items, Sequence) or (not single and not items):
            raise InvalidParameterError("texts must be a string or a non-empty sequence of strings or token-id lists")
        ids = [self._ids(t) for t in items]
        out = np.stack([self.embed_ids(x, pooling, normalize) for x in ids])
        return out[0] if single else out

    def _ids(self, item: str | Sequence[int]) -> list[int]:
        if isinstance(item, str):
            return self.tokenizer.encode(item)
        if isinstance(item, (bytes, bytearray)) or not isinstance(item, Sequence) \
                or any(isinstance(t, bool) or not isinstance(t, (int, np.integer)) for t in item):
            raise InvalidParameterError("each item to embed must be a string or a list of token ids (ints)")
        return [int(t) for t in item]

    # -- what an LLM would do with a generation engine -------------------------------------------------
    def _no_generation(self, *args, **kwargs):
        raise InvalidParameterError(f"{self.model_path.name} is an embedding model ({self.hparams.arch}); it does "
                                    "not generate text: use LLM.embed or `oxigpu embed`")

    start = eval = eval_all = request = submit = prepare = _no_generation
