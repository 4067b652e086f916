"""Model builders: a GGUF file's architecture -> an op graph (see ``transformer.py`` for the block).

Each architecture is a `Family` (``family.py``) in its own module, listed in ``registry.py``; `HParams`
(``hparams.py``) reads and validates a file's hyperparameters against it.
"""
from __future__ import annotations

from typing import Literal

from ..graph.fuse import fuse as fuse_graph
from ..graph.ir import Graph
from .encoder import encoder
from .family import Family
from .hparams import HParams
from .registry import FAMILIES, get_family
from .transformer import decoder


def build_graph(model, hparams: HParams | None = None, T: int = 1, n_ctx: int = 2048,
                logits: Literal["last", "all", "hidden"] = "last", fuse: bool = True, *, S: int = 1,
                n_blocks: int | None = None, decode: bool | None = None,
                cache_types: tuple[str, str] = ("f16", "f16")) -> Graph:
    """The graph of ``model`` (an opened GGUFFile) for steps of ``T`` rows of up to ``S`` sequences of up to
    ``n_ctx`` tokens each, over a KV pool of ``n_blocks`` blocks (default: S full contexts).

    Inputs (graph/ir.py) ``tokens``, ``positions``, ``row_seq`` i32[T], ``block_table`` i32[S, MB] and, for
    a "last" graph that is not a decode graph, ``out_rows`` i32[S]; output ``logits`` [S, vocab] (each
    sequence's last row) or [T, vocab] ("all"), or with "hidden" the final hidden states ``hidden``
    [T, n_embd] (what embeddings are pooled from; encoders always give these, from ``tokens`` and
    ``positions`` of one text). ``decode`` (default: T == S with logits "last"): one row per sequence.
    ``fuse`` applies ``oxigpu.graph.fuse`` (every backend runs the fused graph; off for comparisons).
    ``cache_types``: the K and V caches' types (f16, q8_0, q4_0; oxigpu/quant/kvcache.py).
    """
    fam = get_family(model.arch)
    hp = hparams if hparams is not None else HParams.from_gguf(model)
    if fam.encoder:
        g = encoder(fam, model, hp, T, n_ctx, logits)
    else:
        if decode is None:
            decode = T == S and logits == "last"
        g = decoder(fam, model, hp, T, n_ctx, logits, S=S, n_blocks=n_blocks, decode=decode,
                    cache_types=cache_types)
    return fuse_graph(g) if fuse else g


__all__ = ["build_graph", "FAMILIES", "Family", "HParams", "get_family"]
