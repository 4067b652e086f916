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
                logits: Literal["last", "all", "hidden"] = "last", fuse: bool = True) -> Graph:
    """The graph of ``model`` (an opened GGUFFile) for chunks of ``T`` tokens over a cache of ``n_ctx``.

    Input ``tokens`` i32[T]; output ``logits`` [1, vocab] for the last valid row or [T, vocab] for all, or
    with "hidden" the final hidden states ``hidden`` [T, n_embd] (what embeddings are pooled from;
    encoders always give these). ``fuse`` applies ``oxigpu.graph.fuse`` (every backend runs the fused
    graph; off for comparisons).
    """
    fam = get_family(model.arch)
    hp = hparams if hparams is not None else HParams.from_gguf(model)
    g = (encoder if fam.encoder else decoder)(fam, model, hp, T, n_ctx, logits)
    return fuse_graph(g) if fuse else g


__all__ = ["build_graph", "FAMILIES", "Family", "HParams", "get_family"]
