"""GGUF reading with strict validation: metadata plus zero-copy, memory-mapped tensor views.

Every malformed, truncated or hostile input raises a `GGUFError` subclass naming the file, the field and the
byte offset; nothing is dequantized here.
"""
from .file import GGUFFile, TensorInfo

__all__ = ["GGUFFile", "TensorInfo"]
