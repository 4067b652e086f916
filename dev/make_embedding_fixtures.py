"""Record llama.cpp's embeddings and tokenizations as small fixtures for tests/test_embeddings.py.

    python dev/make_embedding_fixtures.py [--out tests/fixtures/embed] [--only NAME ...]

Needs llama-cpp-python (MODELS.md has the build flags that work here); CI only reads the fixtures. Per
model: llama.cpp's tokens and pooled, unnormalized embedding of each of TEXTS (one text per context, the
pooling the file asks for, or the one named here for decoders), and for encoders its tokenization of the
tokenizer corpus (dev/make_tokenizer_fixtures.py's CORPUS) with and without special tokens. Synthetic files
are written by ``oxigpu.synth`` from a fixed seed; the fixture keeps the file's sha256.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from oxigpu import model_packages  # noqa: E402

TEXTS = [
    "search_query: What is TSNE?",
    "search_document: t-distributed stochastic neighbor embedding (t-SNE) is a statistical method for "
    "visualizing high-dimensional data by giving each datapoint a location in a two or three-dimensional map.",
    "The capital of France is Paris.",
    "Paris is the capital and most populous city of France.",
    "A cat sat on the mat.",
    "Quantum chromodynamics describes the strong interaction between quarks and gluons.",
    "def add(a, b):\n    return a + b",
    "SELECT name, COUNT(*) FROM users GROUP BY name HAVING COUNT(*) > 1;",
    "Café naïve résumé coöperate — accents and dashes.",
    "東京は日本の首都です。 人工智能是计算机科学的一个分支。",
    "Emoji 😀 and symbols ∑ ∞ ≠ and numbers 3.14159 and 1,000,000.",
    "hello",
    "HELLO WORLD, THIS IS SHOUTING!!!",
    "unbelievably antidisestablishmentarianism floccinaucinihilipilification",
    "The mitochondria is the powerhouse of the cell; ATP synthase turns a proton gradient into chemical energy.",
    "In 1969, Apollo 11 landed on the Moon, and Neil Armstrong became the first person to walk on its surface.",
    "classification: this movie was absolutely wonderful, I loved every minute of it",
    "clustering: renewable energy sources include solar, wind, hydroelectric and geothermal power",
    " ".join(["The river flows through the valley past old mills and quiet farms."] * 12),
    "tabs\tand\nnewlines\r\nand   multiple   spaces",
]

# name -> ("real", locator) or ("synth", shape, ftype, seed); and the pooling for decoders (None: the file's)
MODELS: dict[str, tuple] = {
    "nomic-embed-v1.5": ("real", "nomic_embed_v15"),
    "synth-tiny-bert": ("synth", "tiny-bert", "F16", 7),
    "synth-tiny-nomic-bert": ("synth", "tiny-nomic-bert", "Q8_0", 7),
    "synth-tiny-llama-mean": ("synth", "tiny-llama", "Q4_K_M", 7),
    "synth-tiny-llama-last": ("synth", "tiny-llama", "Q4_K_M", 7),
}
DECODER_POOLING = {"synth-tiny-llama-mean": "mean", "synth-tiny-llama-last": "last"}


def model_path(name: str, workdir: Path) -> Path:
    spec = MODELS[name]
    if spec[0] == "real":
        return Path(getattr(model_packages, spec[1])())
    from oxigpu.synth import synthesize
    _, shape, ftype, seed = spec
    path = workdir / f"{shape}-{ftype}-{seed}.gguf"
    if not path.exists():
        synthesize(shape, path, ftype=ftype, seed=seed, workers=1)
    return path


def record(name: str, path: Path) -> dict[str, np.ndarray]:
    import llama_cpp
    pooling = DECODER_POOLING.get(name)
    kw = {}
    if pooling:
        kw["pooling_type"] = {"mean": llama_cpp.LLAMA_POOLING_TYPE_MEAN,
                              "last": llama_cpp.LLAMA_POOLING_TYPE_LAST}[pooling]
    llm = llama_cpp.Llama(model_path=str(path), embedding=True, n_ctx=512, n_batch=512, n_ubatch=512,
                          n_threads=2, verbose=False, **kw)
    tokens, vecs = [], []
    for text in TEXTS:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
        tokens.append(ids)
        vecs.append(np.asarray(llm.embed(text, normalize=False), np.float32))
    out = dict(texts=np.array(TEXTS), embeddings=np.stack(vecs),
               token_ids=np.concatenate([np.asarray(t, np.int32) for t in tokens]),
               token_counts=np.array([len(t) for t in tokens], np.int32),
               pooling=np.array(pooling or ""), source=np.array(MODELS[name][0]),
               synth=np.array(MODELS[name][1:] if MODELS[name][0] == "synth" else (), dtype=str),
               sha256=np.array(model_packages.sha256(path)), llama_cpp_version=np.array(llama_cpp.__version__))
    if llm.metadata.get("tokenizer.ggml.model") == "bert":
        from make_tokenizer_fixtures import CORPUS
        both, plain = [], []
        for text in CORPUS:
            both.append(llm.tokenize(text.encode("utf-8"), add_bos=True, special=True))
            plain.append(llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))
        out.update(corpus=np.array(CORPUS), corpus_ids=np.concatenate([np.asarray(t, np.int32) for t in both]),
                   corpus_counts=np.array([len(t) for t in both], np.int32),
                   corpus_plain_ids=np.concatenate([np.asarray(t, np.int32) for t in plain] or [np.zeros(0)]),
                   corpus_plain_counts=np.array([len(t) for t in plain], np.int32))
    del llm
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "tests/fixtures/embed")
    ap.add_argument("--only", nargs="*", choices=list(MODELS), default=list(MODELS))
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only:
            data = record(name, model_path(name, Path(tmp)))
            dest = args.out / f"{name}.npz"
            np.savez_compressed(dest, **data)
            print(f"{name}: {len(TEXTS)} texts, dim {data['embeddings'].shape[1]}, "
                  f"{dest.stat().st_size / 1024:.0f} KiB -> {dest}", file=sys.stderr)


if __name__ == "__main__":
    main()
