"""BERT and nomic-bert: bidirectional encoders for embeddings (see ``encoder.py``). BERT adds learned
absolute position embeddings and uses a GELU FFN with biases; nomic-bert rotates q/k with NEOX RoPE and
uses a SwiGLU FFN, usually with one fused q/k/v projection. Pooling follows the file's ``pooling_type``
(llama.cpp's numbering), CLS for BERT when the file is silent, mean for nomic-bert."""
from .family import Family

BERT = Family("bert", rope_neox=True, norm_eps=1e-12, qkv_bias=True, encoder=True, norm="layer", rope=False,
              gated=False, act="gelu_tanh", pooling="cls")
NOMIC_BERT = Family("nomic-bert", rope_neox=True, norm_eps=1e-12, rope_base=1000.0, encoder=True, norm="layer",
                    pooling="mean")
