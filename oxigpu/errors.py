"""One exception family for everything oxigpu raises on purpose.

Callers catch `OxigpuError`; the CLI turns it into one line and a non-zero exit.
"""
from __future__ import annotations


class OxigpuError(Exception):
    """Base of every error oxigpu raises deliberately."""


class GGUFError(OxigpuError):
    """A GGUF file is malformed, truncated, hostile or unsupported.

    The message names the file, the field and the byte offset.
    """

    def __init__(self, message: str, *, path: str | None = None, field: str | None = None,
                 offset: int | None = None):
        self.path, self.field, self.offset = path, field, offset
        parts = []
        if path is not None:
            parts.append(str(path))
        if field is not None:
            parts.append(f"field {field!r}")
        if offset is not None:
            parts.append(f"at byte {offset}")
        super().__init__(f"{': '.join([', '.join(parts), message]) if parts else message}")


class GGUFTruncatedError(GGUFError):
    """The file ends before a structure it declares."""


class GGUFFormatError(GGUFError):
    """A value in the file is invalid (bad magic, version, count, offset, duplicate name...)."""


class UnsupportedQuantTypeError(GGUFError):
    """A tensor uses a ggml type oxigpu cannot read."""


class UnsupportedArchitectureError(OxigpuError):
    """`general.architecture` names a model family oxigpu has no builder for."""


class ModelNotFoundError(OxigpuError):
    """No model file at the given path, or the default model package is not installed."""


class ContextLengthError(OxigpuError):
    """A prompt (plus generation) does not fit in the context window."""


class InvalidParameterError(OxigpuError, ValueError):
    """An API or CLI parameter is out of range."""


class DeviceError(OxigpuError):
    """No usable GPU adapter, a missing feature, device loss or a shader failure."""


class OutOfMemoryError(OxigpuError):
    """Weights, KV cache and activations do not fit in device or host memory."""


class TemplateError(OxigpuError):
    """A chat template failed to render or tried to escape the sandbox."""


class TokenizerError(OxigpuError):
    """GGUF tokenizer metadata is missing, inconsistent or uses an unsupported vocabulary type."""


class NumericalError(OxigpuError):
    """The model produced logits nothing can be sampled from (every one NaN or -inf)."""
