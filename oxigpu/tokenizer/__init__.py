"""GGUF vocabularies as HuggingFace `tokenizers` pipelines that tokenize like llama.cpp; chat templates."""
from .chat import ChatTemplate, fallback_template
from .tokenizer import StreamDecoder, Tokenizer

__all__ = ["ChatTemplate", "StreamDecoder", "Tokenizer", "fallback_template"]
