"""Granite (3.x dense): the llama block with four multipliers from the file: ``embedding_scale`` on the
embeddings, ``attention.scale`` for q.k, ``residual_scale`` on the attention and FFN outputs before each
residual add, and logits divided by ``logit_scale`` (HParams reads all four)."""
from .family import Family

GRANITE = Family("granite", rope_neox=False, norm_eps=1e-5)
