"""Budgets on everything a model file or a request controls, in one place.

Each limit sits well above any real model (the comment gives the largest value seen) and is checked
*before* the work it bounds, so a hostile file or request is refused with an `OxigpuError` naming the
field and the limit instead of exhausting memory or time. README.md ("Reliability") lists them with the
tests that show each one.
"""
from __future__ import annotations

# -- GGUF structure (oxigpu/gguf) ----------------------------------------------------------------------
MAX_TENSORS = 1 << 16
"""Tensors in one file (real files: a few hundred to about a thousand)."""
MAX_METADATA_KEYS = 1 << 16
"""Metadata keys in one file (real: 30-60)."""
MAX_ARRAY_ITEMS = 1 << 21
"""Elements of one metadata array, nested levels counted together (real: 262,144 tokens, 280,147 merges).
Checked from the declared count, before an element is read: this is what bounds stored merges in a file."""
MAX_STRING_BYTES = 64 << 20
"""Bytes of one metadata string (real: chat templates of ~20 KiB; embedded tokenizer JSON of a few MiB)."""

# -- tokenizer (oxigpu/tokenizer) --------------------------------------------------------------------------
MAX_VOCAB = 1 << 20
"""Tokens in a vocabulary (real: 262,144)."""
MAX_TOKEN_CHARS = 1 << 12
"""Characters of one token's text (real vocabularies: at most 128)."""
MAX_VOCAB_CHARS = 1 << 23
"""Characters of all token texts together (the largest real vocabulary: about 1.5M)."""
MAX_MERGES = 1 << 21
"""BPE merges, stored in the file or derived from a SentencePiece-style vocabulary (real: 280,147 stored;
a 262,144-token SentencePiece vocabulary derives 514,847)."""
MAX_MERGE_CHARS = 1 << 25
"""Characters of all derived merges together (each merge is a token cut in two; real: 3.1M at most).
Derived merges grow with the square of token length, so they are counted before any is built."""

# -- chat templates (oxigpu/tokenizer/chat.py) -----------------------------------------------------------
MAX_TEMPLATE_CHARS = 1 << 20
"""Characters of a chat template's source (real: ~20 KiB for tool-calling templates)."""
MAX_RENDER_SECONDS = 2.0
"""Wall time of one render (compile-time constant folding included); real templates take milliseconds."""
MAX_OUTPUT_CHARS = 8 << 20
"""Characters a render may output."""
MAX_SEQUENCE_LEN = 1 << 23
"""Largest string, list, dict or tuple any operation inside a template may build (methods, filters,
operators, concatenation, printing), estimated before the operation runs and checked after."""
MAX_INT_BITS = 1 << 12
"""Largest integer (in bits) template arithmetic may build."""
MAX_RANGE_ITEMS = 1_000_000
"""Items all range() calls of one render may yield together."""

# -- requests -------------------------------------------------------------------------------------------
MAX_STOP_STRINGS = 64
"""Stop strings per request (OpenAI's API allows 4)."""
MAX_STOP_CHARS = 1024
"""Characters of one stop string."""
