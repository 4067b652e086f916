"""Where each quant type runs (oxigpu.quant.support, the source of the README table's quant rows): every
type on the GPU, integer dots for every quantized type but Q2_K."""
from oxigpu.quant import SUPPORTED
from oxigpu.quant.support import markdown, rows


def test_every_type_runs_on_the_gpu():
    r = {x["name"]: x for x in rows()}
    assert set(r) == set(SUPPORTED) and all(x["gpu"] and x["mma"] for x in r.values())
    assert {n for n, x in r.items() if not x["int8"]} == {"F32", "F16", "BF16", "Q2_K"}
    assert r["IQ4_XS"]["int8"] == "GEMV (`iq4_xs` piece), GEMM" and r["Q4_K"]["int8"] == "GEMV (`q4_k` piece), GEMM"
    assert r["IQ2_S"]["int8"] == "GEMV (`q32` piece), GEMM"
    assert {n for n, x in r.items() if x["mmv"]} == {"Q4_K", "Q6_K"}
    assert markdown().count("\n") == len(SUPPORTED) + 1
