"""Quant-type fixtures written by llama.cpp's own quantizer (needs llama-cpp-python; CI only reads them).

    python dev/make_quant_fixtures.py blocks [--out tests/fixtures/quants/ggml_blocks.npz]
    python dev/make_quant_fixtures.py models --out DIR [--shape tiny-qwen2] [--types IQ2_XXS ...]

``blocks`` (committed, ~70 KiB): a fixed 8 x 512 f32 matrix (rows of every scale from 2^-20 to 2^10,
heavy tails, outliers, zero and constant blocks, a row of tiny values whose f16 scales are subnormal)
quantized to every block type by ggml (``ggml_quantize_chunk``, with an importance matrix where ggml
requires one), and the SHA-256 of ggml's own dequantization of those bytes (``dequantize_row_*``).
tests/test_quant_ggml.py checks our dequantizers against those digests (bit for bit with ggml, not only
with gguf.quants) and our quantizers against the bytes; tests/test_kernel_quant.py runs the GPU kernels on
them.

``models`` (not committed: a few MiB each): an ``oxigpu synth`` F16 file of ``--shape`` requantized to
each type by ``llama_model_quantize`` (llama-quantize's code; llama.cpp's per-tensor type rules and its
fallbacks for rows that do not hold whole 256-blocks), except the types llama.cpp refuses to write
without an importance matrix (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS): the Python binding cannot
pass one, so those files get every quantized tensor from ``ggml_quantize_chunk`` with an importance
matrix (the routine llama-quantize calls; as ``--pure``, IQ4_NL where a row does not hold whole blocks).
Beside each file, llama.cpp's teacher-forced logits (its shipped path and its float path on the file
requantized to F32) in the format of dev/make_parity_fixtures.py; tests/test_quant_models.py compares
oxigpu (numpy and wgpu) with them when ``OXIGPU_QUANT_MODELS=DIR``.
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from oxigpu.quant import SUPPORTED, get_type  # noqa: E402

BLOCK_ROWS, BLOCK_COLS = 8, 512
MODEL_TYPES = ("Q2_K", "Q3_K_M", "Q5_K_M", "Q4_1", "Q5_1", "IQ4_NL", "IQ4_XS", "IQ3_XXS", "IQ3_S", "IQ2_XXS",
               "IQ2_XS", "IQ2_S", "IQ1_S", "IQ1_M", "TQ1_0", "TQ2_0", "BF16")
"""llama.cpp file types (``LLAMA_FTYPE_MOSTLY_<name>``) for ``models``: every type issue 26 names."""
NEEDS_IMATRIX = ("IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS")
"""File types llama_model_quantize refuses without an importance matrix."""
N_POS, K_TOP, N_SAMPLE, N_CTX = 64, 16, 48, 128


class Ggml:
    """The ggml functions of llama-cpp-python's bundled libggml-base, through ctypes."""

    def __init__(self) -> None:
        import llama_cpp
        libs = glob.glob(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so*"))
        if not libs:
            raise SystemExit("llama_cpp has no bundled libggml-base")
        self.lib = lib = ctypes.CDLL(libs[0])
        lib.ggml_quantize_chunk.restype = ctypes.c_size_t
        lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                            ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
        lib.ggml_quantize_requires_imatrix.restype = ctypes.c_bool
        lib.ggml_quantize_requires_imatrix.argtypes = [ctypes.c_int]

    def requires_imatrix(self, qtype: str) -> bool:
        return bool(self.lib.ggml_quantize_requires_imatrix(get_type(qtype).ggml_type))

    def quantize(self, x: np.ndarray, qtype: str, imatrix: np.ndarray | None) -> np.ndarray:
        qt = get_type(qtype)
        x = np.ascontiguousarray(x, np.float32)
        out = np.zeros((x.shape[0], qt.row_bytes(x.shape[1])), np.uint8)
        im = None if imatrix is None else np.ascontiguousarray(imatrix, np.float32)
        n = self.lib.ggml_quantize_chunk(qt.ggml_type, x.ctypes.data, out.ctypes.data, 0, x.shape[0], x.shape[1],
                                         None if im is None else im.ctypes.data)
        assert n == out.nbytes, (qtype, n, out.nbytes)
        return out

    def dequantize(self, raw: np.ndarray, qtype: str, n_cols: int) -> np.ndarray:
        qt = get_type(qtype)
        raw = np.ascontiguousarray(raw)
        y = np.empty((raw.shape[0], n_cols), np.float32)
        name = {"F16": "ggml_fp16_to_fp32_row", "BF16": "ggml_bf16_to_fp32_row"}.get(
            qt.name, f"dequantize_row_{qt.name.lower().replace('_k', '_K')}")
        fn = getattr(self.lib, name)
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        fn(raw.ctypes.data, y.ctypes.data, y.size)
        return y


def block_source() -> np.ndarray:
    """The blocks fixture's f32 matrix: one row per distribution the quantizers branch on."""
    rng = np.random.default_rng(26)
    x = rng.standard_normal((BLOCK_ROWS, BLOCK_COLS))
    x *= 2.0 ** np.linspace(-20, 10, BLOCK_ROWS)[:, None]     # every scale, including tiny (subnormal f16 d)
    x[1] = rng.standard_t(2, BLOCK_COLS)                        # heavy tails
    x[2, ::37] *= 60                                            # outliers
    x[3, :256] = 0                                              # a zero super-block
    x[4, 256:512] = 0.37                                        # a constant one
    x[5] = np.abs(x[5])                                         # one-signed
    x[6, 64:96] = 1e-30                                         # a group below every epsilon
    return x.astype(np.float32)


def make_blocks(out: Path) -> None:
    g = Ggml()
    x = block_source()
    imatrix = np.random.default_rng(27).lognormal(0.0, 1.0, BLOCK_COLS).astype(np.float32)
    data: dict[str, np.ndarray] = {"source": x, "imatrix": imatrix}
    meta: dict[str, dict] = {}
    for name in SUPPORTED:
        if name == "F32":
            continue
        with_im = g.requires_imatrix(name)
        q = g.quantize(x, name, imatrix if with_im else None)
        y = g.dequantize(q, name, BLOCK_COLS)
        data[f"q_{name}"] = q
        meta[name] = {"imatrix": with_im, "dequant_sha256": hashlib.sha256(y.tobytes()).hexdigest()}
    import llama_cpp
    data["meta"] = np.array(json.dumps({"llama_cpp_version": llama_cpp.__version__, "types": meta}, indent=1))
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, **data)
    print(f"{len(meta)} types, {out.stat().st_size / 1024:.0f} KiB -> {out}", file=sys.stderr)


# -- models ------------------------------------------------------------------------------------------------

def _quantizable(name: str, shape: tuple[int, ...]) -> bool:
    """llama.cpp's rule: 2-D weights that are not norms (and not rope factors) are quantized."""
    return len(shape) == 2 and name.endswith("weight") and not name.endswith("_norm.weight") \
        and name != "rope_freqs.weight"


def write_with_ggml(src: Path, dst: Path, qtype: str, g: Ggml) -> None:
    """``src`` (F16) with every quantizable tensor quantized to ``qtype`` by ggml with an importance matrix
    (IQ4_NL where a row does not hold whole blocks, as llama.cpp falls back), written with gguf-py."""
    from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
    from gguf.constants import LlamaFileType
    r = GGUFReader(src)
    arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")
    w = GGUFWriter(dst, arch)
    for field in r.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        vtype = field.types[0]
        if field.name == "general.file_type":
            w.add_uint32(field.name, int(getattr(LlamaFileType, f"MOSTLY_{qtype}")))
            continue
        if vtype == GGUFValueType.ARRAY:
            sub = field.types[-1]
            vals = [str(bytes(field.parts[i]), "utf-8") if sub == GGUFValueType.STRING else field.parts[i][0].item()
                    for i in field.data]
            w.add_array(field.name, vals)
        elif vtype == GGUFValueType.STRING:
            w.add_string(field.name, str(bytes(field.parts[-1]), "utf-8"))
        else:
            w.add_key_value(field.name, field.parts[-1][0].item(), vtype)
    rng = np.random.default_rng(28)
    for t in r.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))      # numpy order: rows, cols
        data = np.asarray(t.data)
        if not _quantizable(t.name, shape):
            w.add_tensor(t.name, np.ascontiguousarray(data), raw_dtype=GGMLQuantizationType(int(t.tensor_type)))
            continue
        x = data.astype(np.float32).reshape(shape)
        target = qtype if shape[1] % get_type(qtype).block_size == 0 else "IQ4_NL"
        im = rng.lognormal(0.0, 1.0, shape[1]).astype(np.float32)
        q = g.quantize(x, target, im if g.requires_imatrix(target) else im)
        w.add_tensor(t.name, q, raw_shape=q.shape, raw_dtype=GGMLQuantizationType[target])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def quantize_model(src: Path, dst: Path, ftype: str, g: Ggml) -> str:
    """Writes ``dst``; returns how ("llama_model_quantize" or "ggml_quantize_chunk + imatrix")."""
    import llama_cpp
    if ftype in NEEDS_IMATRIX:
        write_with_ggml(src, dst, ftype, g)
        return "ggml_quantize_chunk + imatrix"
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    p.nthread = 2
    if llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(p)) != 0:
        raise SystemExit(f"llama_model_quantize failed for {ftype}")
    return "llama_model_quantize"


def record_logits(path: Path, workdir: Path) -> dict[str, np.ndarray]:
    """llama.cpp's teacher-forced logits on ``path`` (shipped and float path), as make_parity_fixtures."""
    sys.path.insert(0, str(ROOT / "dev"))
    import make_parity_fixtures as mpf
    mpf.N_POS, mpf.N_CTX = N_POS, N_CTX
    tokens = [int(t) for t in np.random.default_rng(29).integers(0, 1024, N_POS)]
    _, shipped = mpf.run_llamacpp(path, tokens, f32_cache=False)
    f32 = mpf.requantize_f32(path, workdir / f"{path.stem}-f32.gguf")
    _, exact = mpf.run_llamacpp(f32, tokens, f32_cache=True)
    f32.unlink()
    vocab = shipped.shape[1]
    top = np.argsort(-shipped, axis=1, kind="stable")[:, :K_TOP]
    sample = np.sort(np.random.default_rng(30).choice(vocab, size=N_SAMPLE, replace=False))
    ids = np.concatenate([top, np.broadcast_to(sample, (N_POS, N_SAMPLE))], axis=1).astype(np.int32)
    (s_ids, s_vals), (e_ids, e_vals) = mpf.top2(shipped), mpf.top2(exact)
    return dict(tokens=np.asarray(tokens, np.int32), ids=ids, n_ctx=np.int64(N_CTX), vocab=np.int64(vocab),
                shipped_values=np.take_along_axis(shipped, ids, 1), shipped_top2_ids=s_ids,
                shipped_top2_values=s_vals, exact_values=np.take_along_axis(exact, ids, 1),
                exact_top2_ids=e_ids, exact_top2_values=e_vals)


def make_models(out: Path, shape: str, types: list[str]) -> None:
    from oxigpu.synth import synthesize
    g = Ggml()
    out.mkdir(parents=True, exist_ok=True)
    manifest = {}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / f"{shape}-F16.gguf"
        synthesize(shape, src, ftype="F16", seed=26, workers=1)
        for ftype in types:
            dst = out / f"{shape}-{ftype}.gguf"
            how = quantize_model(src, dst, ftype, g)
            np.savez_compressed(out / f"{shape}-{ftype}.npz", **record_logits(dst, Path(tmp)))
            manifest[dst.name] = {"ftype": ftype, "written_by": how,
                                  "sha256": hashlib.sha256(dst.read_bytes()).hexdigest()}
            print(f"{dst.name}: {how}, {dst.stat().st_size / 1024:.0f} KiB", file=sys.stderr)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    b = sub.add_parser("blocks")
    b.add_argument("--out", type=Path, default=ROOT / "tests/fixtures/quants/ggml_blocks.npz")
    m = sub.add_parser("models")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--shape", default="tiny-qwen2")
    m.add_argument("--types", nargs="*", choices=MODEL_TYPES, default=list(MODEL_TYPES))
    args = ap.parse_args(argv)
    if args.what == "blocks":
        make_blocks(args.out)
    else:
        make_models(args.out, args.shape, args.types)


if __name__ == "__main__":
    main()
