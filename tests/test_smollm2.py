"""SmolLM2-135M-Instruct (llama, Q4_1 with a Q8_0 tied embedding, byte-level BPE with the `smollm`
pre-tokenizer) against llama.cpp: tokenization of the tokenizer corpus (fixture from
dev/make_tokenizer_fixtures.py), every token's piece, the end-of-generation ids; teacher-forced logits
are tests/test_parity_llamacpp.py's smollm2-135m case.

Two things differ from the other real models and are not tested here: the vocabulary has no symbol for
some control bytes (so text holding them cannot round-trip), and llama.cpp picks its end-of-turn id by
walking a hash map, which for this vocabulary lands on <|endoftext|> where our fixed priority list takes
<|im_end|>; both are end-of-generation tokens either way.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from oxigpu.gguf import GGUFFile
from oxigpu.tokenizer import Tokenizer

pytestmark = pytest.mark.realmodel

FIXTURE = Path(__file__).parent / "fixtures" / "tokenizer" / "smollm2.json"


@pytest.fixture(scope="module")
def smollm2(smollm2_path):
    with GGUFFile(smollm2_path) as f:
        return Tokenizer.from_metadata(f.metadata), json.loads(FIXTURE.read_text(encoding="utf-8"))


def test_tokenization_matches_llama_cpp(smollm2):
    tok, fx = smollm2
    assert len(fx["cases"]) >= 40
    bad = [c["text"] for c in fx["cases"]
           if tok.encode(c["text"]) != c["ids"]
           or tok.encode(c["text"], add_special=False, parse_special=False) != c["ids_plain"]
           or tok.decode(c["ids"]) != c["decoded"]
           or tok.decode(c["ids"], skip_special=True) != c["decoded_skip_special"]]
    assert not bad, bad[:3]


def test_pieces_and_special_ids_match_llama_cpp(smollm2):
    tok, fx = smollm2
    assert tok.vocab_size == fx["n_vocab"] and (tok.bos_id, tok.eos_id) == (fx["bos_id"], fx["eos_id"])
    assert not tok.add_bos and tok.eog_ids == set(fx["eog_ids"])
    for special, key in ((True, "pieces_sha256"), (False, "pieces_sha256_no_special")):
        h = hashlib.sha256()
        for i in range(tok.vocab_size):
            piece = tok.token_to_piece(i, special)
            h.update(len(piece).to_bytes(4, "little") + piece)
        assert h.hexdigest() == fx[key], key
