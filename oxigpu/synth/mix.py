"""Per-tensor type choice, following llama.cpp's `llama_tensor_get_type` (src/llama-quant.cpp).

What we follow, for the dense decoder architectures oxigpu supports (no experts, no imatrix):

* Only 2-D tensors whose name ends in "weight" and that are not norms are quantized; norms, biases and
  `rope_freqs.weight` stay F32.
* Q4_K_M (ftype 15, base Q4_K) and Q5_K_M (ftype 17, base Q5_K):
  - `output.weight`, or `token_embd.weight` when there is no `output.weight` (tied LM head): Q6_K, or
    Q8_0 when the row length is not a multiple of the base type's block (256).
  - `attn_v.weight` and `ffn_down.weight` of the "use_more_bits" layers: Q6_K, where
    use_more_bits(i, n) = i < n/8 or i >= 7n/8 or (i - n/8) % 3 == 2 (integer division).
  - everything else, `token_embd.weight` of an untied model included: the base type.
* IQ4_XS (ftype 30) and IQ4_NL (ftype 25), without an importance matrix:
  - `output.weight` (or a tied `token_embd.weight`): Q6_K, as in the K mixes;
  - `attn_v.weight`: Q5_K when n_head / n_head_kv >= 4;
  - `ffn_down.weight` (and the experts' `ffn_down_exps.weight`) of the first n_layer/8 layers: Q5_K;
  - everything else the base type.
* Single types (`--type Q8_0`, ...; llama.cpp's `--pure`): every quantized tensor gets that type.
* Fallback when the row length is not a multiple of the chosen type's block, as llama.cpp's: Q4_K ->
  Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K / Q3_K / IQ4_XS -> IQ4_NL, and F16 if even that does not fit.
  llama.cpp applies it in its mixes; we also apply it to single types so every shape can be written.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidParameterError

MIXES = {"Q4_K_M": "Q4_K", "Q5_K_M": "Q5_K", "IQ4_XS": "IQ4_XS", "IQ4_NL": "IQ4_NL"}
_IQ4 = ("IQ4_XS", "IQ4_NL")
SINGLE_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
                "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
FTYPES = (*MIXES, *SINGLE_TYPES)

_BLOCK = {"F32": 1, "F16": 1, "BF16": 1, "Q4_0": 32, "Q4_1": 32, "Q5_0": 32, "Q5_1": 32, "Q8_0": 32,
          "Q2_K": 256, "Q3_K": 256, "Q4_K": 256, "Q5_K": 256, "Q6_K": 256, "IQ4_XS": 256, "IQ4_NL": 32}
_FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0", "Q2_K": "IQ4_NL", "Q3_K": "IQ4_NL", "IQ4_XS": "IQ4_NL"}


def use_more_bits(i_layer: int, n_layer: int) -> bool:
    """llama.cpp's choice of layers that get more bits in the *_M mixes."""
    return i_layer < n_layer // 8 or i_layer >= 7 * n_layer // 8 or (i_layer - n_layer // 8) % 3 == 2


@dataclass(frozen=True)
class Mix:
    """A file type: a llama.cpp mix name or a single ggml type name."""

    ftype: str

    def __post_init__(self) -> None:
        if self.ftype not in FTYPES:
            raise InvalidParameterError(f"unknown type {self.ftype!r}; choose one of: {', '.join(FTYPES)}")

    def tensor_type(self, name: str, ne: tuple[int, ...], n_layer: int, tied: bool, n_gqa: int = 1) -> str:
        """ggml type name for tensor `name` with ggml dims `ne` (ne[0] = row length); `n_gqa` is
        n_head / n_head_kv (the IQ4 mixes' attn_v rule)."""
        if len(ne) < 2 or not name.endswith("weight") or name.endswith("_norm.weight") \
                or name in ("rope_freqs.weight", "token_types.weight", "position_embd.weight") \
                or name.endswith("ffn_gate_inp.weight"):   # llama.cpp never quantizes these
            return "F32"
        base = MIXES.get(self.ftype)
        if base is None:
            return _fit(self.ftype, ne[0])
        if name == "output.weight" or (tied and name == "token_embd.weight"):
            return _fit("Q6_K", ne[0])   # Q8_0 where a row holds no whole 256-blocks (the IQ4_NL mix too)
        layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
        if self.ftype in _IQ4:
            if (name.endswith("attn_v.weight") and n_gqa >= 4) or \
                    (name.endswith(("ffn_down.weight", "ffn_down_exps.weight")) and 0 <= layer < n_layer // 8):
                return _fit("Q5_K", ne[0])
            return _fit(base, ne[0])
        if name.endswith(("attn_v.weight", "ffn_down.weight", "ffn_down_exps.weight")) \
                and use_more_bits(layer, n_layer):
            return _fit("Q6_K", ne[0])
        return _fit(base, ne[0])


def _fit(qtype: str, row: int) -> str:
    """`qtype`, or llama.cpp's fallback when a row of `row` elements does not hold whole blocks."""
    if row % _BLOCK[qtype] == 0:
        return qtype
    fallback = _FALLBACK.get(qtype)
    if fallback is None:
        return "F16"
    return fallback if row % _BLOCK[fallback] == 0 else "F16"
