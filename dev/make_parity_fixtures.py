"""Record llama.cpp's teacher-forced logits as small fixtures for tests/test_parity_llamacpp.py.

    python dev/make_parity_fixtures.py [--out tests/fixtures/parity] [--only NAME ...]

Needs llama-cpp-python (see MODELS.md for the build flags that work here); CI only reads the fixtures.
For every model: tokenize TEXT with llama.cpp itself (so the parity test does not depend on our
tokenizer) and evaluate all positions in one batch with logits_all, twice:
- "shipped": the file as it is, llama.cpp's defaults (its CPU kernels quantize activations to 8 bits for
  quantized weights; the KV cache is f16);
- "exact": the same weights requantized by llama.cpp to F32 (lossless: every quant type dequantizes
  exactly into f32) with an F32 KV cache, so llama.cpp runs the float path we implement.
Per position we keep both runs' top-2 ids and values, and both runs' logits at N_KEEP ids: the shipped
run's top-K_TOP and a fixed random sample of the vocabulary. Synthetic models are written by
``oxigpu.synth`` from a fixed seed; the fixture records the file's sha256 so the test can tell a
changed generator from a numeric regression.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

from oxigpu import model_packages

N_CTX = 512
N_POS = 320          # teacher-forced positions per model
K_TOP = 32           # per-position top ids kept
N_SAMPLE = 224       # random vocabulary ids kept (same for every position)
SAMPLE_SEED = 1234

TEXT = """\
The old lighthouse stood at the end of a narrow spit of rock, and for ninety years its keepers had \
written the weather into a ledger every evening: wind, sea state, visibility, and the ships that passed. \
When the light was automated the ledgers were moved to the town library, where a retired teacher began \
to read them one winter. She noticed that the entries grew shorter in the years before the war, and \
longer again afterwards, as if the keepers had more to say once the danger was over.

def moving_average(values, window=3):
    \"\"\"Return the moving average of a list of numbers.\"\"\"
    if window <= 0:
        raise ValueError("window must be positive")
    out = []
    total = 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out

Question: What is the capital of France, and which river flows through it?
Answer: The capital of France is Paris, and the Seine flows through the city from east to west. \
Paris has been the country's political and cultural centre for centuries, home to museums such as \
the Louvre and the Musee d'Orsay, and to more than two million people within the city limits.

Recipe notes: whisk two eggs with 250 ml of milk and 120 g of flour until smooth, rest the batter for \
thirty minutes, then cook thin pancakes in a hot buttered pan, about one minute per side. Serve with \
lemon and sugar, or fold around grated cheese and ham for a savoury version.
"""

# name -> how to get the file: ("real", locator) or ("synth", shape, ftype, seed)
MODELS: dict[str, tuple] = {
    "gemma3-270m": ("real", "gemma3_270m"),
    "qwen2.5-coder-0.5b": ("real", "qwen25_coder_05b"),
    "smollm2-135m": ("real", "smollm2_135m"),
    "synth-tiny-llama": ("synth", "tiny-llama", "Q4_K_M", 7),
    "synth-tiny-qwen3": ("synth", "tiny-qwen3", "Q4_K_M", 7),
    "synth-tiny-gemma3": ("synth", "tiny-gemma3", "Q4_K_M", 7),
    "synth-tiny-mistral": ("synth", "tiny-mistral", "Q4_K_M", 7),
    "synth-tiny-phi3": ("synth", "tiny-phi3", "Q4_K_M", 7),
    "synth-tiny-gemma2": ("synth", "tiny-gemma2", "Q4_K_M", 7),
    "synth-tiny-olmo2": ("synth", "tiny-olmo2", "Q4_K_M", 7),
    "synth-tiny-granite": ("synth", "tiny-granite", "Q4_K_M", 7),
    "synth-tiny-mixtral": ("synth", "tiny-mixtral", "Q4_K_M", 7),
    "synth-tiny-qwen3moe": ("synth", "tiny-qwen3moe", "Q4_K_M", 7),
    "synth-tiny-olmoe": ("synth", "tiny-olmoe", "Q4_K_M", 7),
}

# llama.cpp runs llama files without the sliding window they may declare (its converters never write
# one). For those, the reference is made token by token, dropping each step the cache rows the window no
# longer sees: every layer then attends exactly the last `window` positions, which is what the window means.
WINDOWED_LLAMA = {"synth-tiny-mistral"}


def model_path(name: str, workdir: Path) -> Path:
    """The GGUF file for ``name``; synthetic files are (re)written into ``workdir``."""
    spec = MODELS[name]
    if spec[0] == "real":
        return Path(getattr(model_packages, spec[1])())
    from oxigpu.synth import synthesize
    _, shape, ftype, seed = spec
    path = workdir / f"{name}.gguf"
    if not path.exists():
        synthesize(shape, path, ftype=ftype, seed=seed, workers=1)
    return path


def requantize_f32(src: Path, dst: Path) -> Path:
    """``src`` with every tensor dequantized to F32 by llama.cpp's own quantizer."""
    import ctypes

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_ALL_F32
    params.allow_requantize = True
    if llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params)) != 0:
        raise SystemExit(f"llama_model_quantize failed for {src}")
    return dst


def run_llamacpp(path: Path, tokens: list[int] | None, f32_cache: bool,
                 window: int | None = None) -> tuple[list[int], np.ndarray]:
    """(tokens, logits [N_POS, vocab]); tokenizes TEXT when ``tokens`` is None. With ``window``, one token
    per step and the cache trimmed to the last ``window`` positions before each (see WINDOWED_LLAMA)."""
    import llama_cpp

    kw = dict(type_k=0, type_v=0) if f32_cache else {}  # GGML_TYPE_F32
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=N_CTX, logits_all=True,
                          n_threads=2, verbose=False, **kw)
    if tokens is None:
        tokens = llm.tokenize(TEXT.encode("utf-8"), add_bos=True, special=False)
        if len(tokens) < N_POS:
            raise SystemExit(f"{path}: TEXT gives only {len(tokens)} tokens, need {N_POS}")
        tokens = tokens[:N_POS]
    llm.reset()
    if window is None:
        llm.eval(tokens)
    else:
        mem = llama_cpp.llama_get_memory(llm.ctx)
        for i, tok in enumerate(tokens):
            if i >= window:
                llama_cpp.llama_memory_seq_rm(mem, 0, 0, i - window + 1)
            llm.eval([tok])
    logits = np.array(llm.scores[:N_POS], dtype=np.float32)
    del llm
    return tokens, logits


def top2(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ids = np.argsort(-logits, axis=1, kind="stable")[:, :2]
    return ids.astype(np.int32), np.take_along_axis(logits, ids, 1).astype(np.float32)


def record(name: str, path: Path, workdir: Path) -> dict[str, np.ndarray]:
    import llama_cpp

    window = None
    if name in WINDOWED_LLAMA:
        from oxigpu.gguf import GGUFFile
        with GGUFFile(path) as f:
            window = int(f.metadata["llama.attention.sliding_window"])
    tokens, shipped = run_llamacpp(path, None, f32_cache=False, window=window)
    f32_path = requantize_f32(path, workdir / f"{name}-f32.gguf")
    _, exact = run_llamacpp(f32_path, tokens, f32_cache=True, window=window)
    f32_path.unlink()
    vocab = shipped.shape[1]
    top = np.argsort(-shipped, axis=1, kind="stable")[:, :K_TOP]
    sample = np.sort(np.random.default_rng(SAMPLE_SEED).choice(vocab, size=min(N_SAMPLE, vocab), replace=False))
    ids = np.concatenate([top, np.broadcast_to(sample, (N_POS, len(sample)))], axis=1).astype(np.int32)
    spec = MODELS[name]
    (s_ids, s_vals), (e_ids, e_vals) = top2(shipped), top2(exact)
    return dict(
        tokens=np.asarray(tokens, np.int32),
        ids=ids,
        shipped_values=np.take_along_axis(shipped, ids, 1),
        shipped_top2_ids=s_ids, shipped_top2_values=s_vals,
        exact_values=np.take_along_axis(exact, ids, 1),
        exact_top2_ids=e_ids, exact_top2_values=e_vals,
        vocab=np.int64(vocab),
        n_ctx=np.int64(N_CTX),
        source=np.array(spec[0]),
        synth=np.array(spec[1:] if spec[0] == "synth" else (), dtype=str),
        sha256=np.array(model_packages.sha256(path)),
        llama_cpp_version=np.array(llama_cpp.__version__),
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "tests/fixtures/parity")
    ap.add_argument("--only", nargs="*", choices=list(MODELS), default=list(MODELS))
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only:
            data = record(name, model_path(name, Path(tmp)), Path(tmp))
            dest = args.out / f"{name}.npz"
            np.savez_compressed(dest, **data)
            print(f"{name}: {len(data['tokens'])} positions, vocab {int(data['vocab'])}, "
                  f"{dest.stat().st_size / 1024:.0f} KiB -> {dest}", file=sys.stderr)


if __name__ == "__main__":
    main()
