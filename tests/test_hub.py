"""Models by name from the Hugging Face Hub (oxigpu/hub.py), with no network: a local server speaking the
Hub's file API (tests/hub_server.py, through HF_ENDPOINT) and a cache it fills, then read offline."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from oxigpu import LLM, hub
from oxigpu.cli.main import cli
from oxigpu.errors import InvalidParameterError, ModelNotFoundError

sys.path.insert(0, str(Path(__file__).parent))
from gguf_edit import split  # noqa: E402
from hub_server import FakeHub, Repo  # noqa: E402


def test_parse_ref():
    assert hub.parse_ref("bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M") == \
        hub.HubRef("bartowski/Llama-3.2-1B-Instruct-GGUF", "Q4_K_M")
    assert hub.parse_ref("org/repo/sub/model-q8_0.gguf") == hub.HubRef("org/repo", None, "sub/model-q8_0.gguf")
    assert hub.parse_ref("org/repo") == hub.HubRef("org/repo")
    for local in ("model.gguf", "./org/repo", "/abs/org/repo.gguf", "~/x/y", "a/b/c", "org/repo:", ":Q4_K_M",
                  "C:\\models\\x.gguf", "org/repo/file.bin"):
        assert hub.parse_ref(local) is None, local


FILES = ["README.md", "m-Q4_K_M.gguf", "m-Q8_0.gguf", "m-IQ4_XS.gguf", "mmproj-m-f16.gguf",
         "big/m-Q6_K-00001-of-00002.gguf", "big/m-Q6_K-00002-of-00002.gguf"]


def test_choose_files():
    choose = hub.choose
    assert choose(hub.HubRef("o/r", "q8_0"), FILES) == ["m-Q8_0.gguf"]
    assert choose(hub.HubRef("o/r", "Q6_K"), FILES) == ["big/m-Q6_K-00001-of-00002.gguf",
                                                        "big/m-Q6_K-00002-of-00002.gguf"]
    assert choose(hub.HubRef("o/r", None, "big/m-Q6_K-00002-of-00002.gguf"), FILES)[0].endswith("00001-of-00002.gguf")
    assert choose(hub.HubRef("o/r"), FILES) == ["m-Q4_K_M.gguf"]                 # the default quant
    assert choose(hub.HubRef("o/r"), ["only.gguf", "README.md"]) == ["only.gguf"]
    assert hub.quants(FILES) == ["Q4_K_M", "Q8_0", "IQ4_XS", "F16", "Q6_K"]
    with pytest.raises(ModelNotFoundError, match=r"no Q4_K file; quant types there: Q4_K_M, Q8_0"):
        choose(hub.HubRef("o/r", "Q4_K"), FILES)                                  # a prefix is not a match
    with pytest.raises(ModelNotFoundError, match="name one as o/r:QUANT"):
        choose(hub.HubRef("o/r"), ["a-Q8_0.gguf", "a-F16.gguf"])
    with pytest.raises(ModelNotFoundError, match="no file 'x.gguf'; its GGUF files: m-Q4_K_M.gguf"):
        choose(hub.HubRef("o/r", None, "x.gguf"), FILES)
    with pytest.raises(ModelNotFoundError, match="incomplete"):
        choose(hub.HubRef("o/r", "Q6_K", None), FILES[:-1])
    with pytest.raises(ModelNotFoundError, match="2 files"):
        choose(hub.HubRef("o/r", "Q8_0"), ["a-Q8_0.gguf", "b-Q8_0.gguf"])
    with pytest.raises(ModelNotFoundError, match="no .gguf"):
        choose(hub.HubRef("o/r"), ["README.md"])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, list[Path]]:
    """A tiny model file, and the same model as a 3-shard split set."""
    from oxigpu.synth import synthesize
    d = tmp_path_factory.mktemp("hubfiles")
    path = synthesize("tiny-llama", d / "tiny.gguf", "Q8_0", seed=3, workers=1).path
    (d / "split").mkdir()
    return path, split(path, d / "split", "tiny-Q6_K", 8)


@pytest.fixture
def served(tiny, tmp_path, monkeypatch):
    path, shards = tiny
    repos = {"org/tiny-GGUF": Repo({"README.md": b"# tiny", "tiny-Q8_0.gguf": path.read_bytes(),
                                    "tiny-F16.gguf": b"not used",
                                    **{f"split/{s.name}": s.read_bytes() for s in shards}}),
             "org/private": Repo({"p-Q8_0.gguf": path.read_bytes()}, token="hf_secret"),
             "org/gated": Repo({"g-Q8_0.gguf": b"x"}, gated=True)}
    with FakeHub(repos) as fake:
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        monkeypatch.delenv("HF_HUB_CACHE", raising=False)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
        yield fake, path


def _greedy(llm: LLM) -> list[int]:
    return llm.generate("Hello there", max_tokens=6, temperature=0).token_ids


def test_download_by_quant_then_from_the_cache(served):
    fake, path = served
    got = hub.download("org/tiny-GGUF:Q8_0")
    assert got.read_bytes() == path.read_bytes() and "models--org--tiny-GGUF" in str(got)
    assert fake.gets("tiny-Q8_0.gguf") == [None]
    again = hub.download("org/tiny-GGUF:q8_0")          # cached: a HEAD, no second transfer
    assert again == got and fake.gets("tiny-Q8_0.gguf") == [None]
    llm = LLM("org/tiny-GGUF:Q8_0", backend="numpy", n_ctx=64)
    assert _greedy(llm) == _greedy(LLM(str(path), backend="numpy", n_ctx=64))


def test_split_sets_are_fetched_whole(served):
    fake, path = served
    first = hub.download("org/tiny-GGUF:Q6_K")
    assert first.name == "tiny-Q6_K-00001-of-00003.gguf"
    assert sorted(p.name for p in first.parent.iterdir()) == [f"tiny-Q6_K-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    llm = LLM.from_pretrained("org/tiny-GGUF", filename="split/tiny-Q6_K-00002-of-00003.gguf", backend="numpy",
                              n_ctx=64)
    assert _greedy(llm) == _greedy(LLM(str(path), backend="numpy", n_ctx=64))


def test_interrupted_download_resumes(served, monkeypatch):
    """The transfer breaks after 100,000 bytes; the client asks for the rest (Range), keeping what it has."""
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 1 << 14)   # hand bytes over before the cut
    fake, path = served
    fake.cut_first_get_at = 100_000
    try:
        got = hub.download("org/tiny-GGUF/tiny-Q8_0.gguf")
    except ModelNotFoundError:                    # the client gave up on this call: the next one resumes
        got = hub.download("org/tiny-GGUF/tiny-Q8_0.gguf")
    assert got.read_bytes() == path.read_bytes()
    assert fake.gets("tiny-Q8_0.gguf")[-1] == "bytes=98304-", fake.log   # the whole 16 KiB chunks kept


def test_tokens_private_and_gated_repositories(served, monkeypatch):
    fake, path = served
    with pytest.raises(ModelNotFoundError, match="no model repository 'org/private'.*HF_TOKEN"):
        hub.download("org/private:Q8_0")
    assert hub.download("org/private:Q8_0", token="hf_secret").read_bytes() == path.read_bytes()
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    llm = LLM.from_pretrained("org/private", "Q8_0", backend="numpy", n_ctx=64)
    assert llm.arch == "llama"
    with pytest.raises(ModelNotFoundError, match="gated"):
        hub.download("org/gated:Q8_0")


def test_clear_errors_for_what_does_not_exist(served):
    with pytest.raises(ModelNotFoundError, match="no model repository 'org/nope'"):
        LLM("org/nope:Q4_K_M", backend="numpy")
    with pytest.raises(ModelNotFoundError, match=r"no Q4_K_M file; quant types there: Q6_K, F16, Q8_0"):
        LLM.from_pretrained("org/tiny-GGUF", "Q4_K_M")
    with pytest.raises(ModelNotFoundError, match="no file 'missing.gguf'"):
        hub.download("org/tiny-GGUF/missing.gguf")
    with pytest.raises(InvalidParameterError):
        LLM.from_pretrained("org/tiny-GGUF:Q8_0")
    res = CliRunner().invoke(cli, ["run", "-m", "org/tiny-GGUF:Q2_K", "-p", "hi", "-n", "1", "--backend", "numpy"])
    assert res.exit_code == 1 and "no Q2_K file" in res.output and "Traceback" not in res.output


def test_offline_from_a_prefilled_cache(served, monkeypatch):
    fake, path = served
    hub.download("org/tiny-GGUF:Q8_0")                 # fills the cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")   # nothing listens there
    n = len(fake.log)
    llm = LLM("org/tiny-GGUF:Q8_0", backend="numpy", n_ctx=64)
    assert _greedy(llm) == _greedy(LLM(str(path), backend="numpy", n_ctx=64)) and len(fake.log) == n
    with pytest.raises(ModelNotFoundError, match="HF_HUB_OFFLINE"):
        hub.download("org/tiny-GGUF:Q6_K")
    with pytest.raises(ModelNotFoundError, match="HF_HUB_OFFLINE"):
        hub.download("org/other:Q8_0")


def test_cli_run_by_name_shows_download_progress(served):
    fake, path = served
    # huggingface_hub draws its bar on terminals only; TQDM_POSITION=-1 is its switch to draw it anyway
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "TQDM_POSITION": "-1"}
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    res = subprocess.run([sys.executable, "-m", "oxigpu", "run", "-m", "org/tiny-GGUF:Q8_0", "-p", "Hello there",
                          "-n", "4", "--temp", "0", "--backend", "numpy"], capture_output=True, text=True, env=env,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    assert "tiny-Q8_0.gguf" in res.stderr and "100%" in res.stderr      # huggingface_hub's tqdm bar
    expected = LLM(str(path), backend="numpy").generate("Hello there", max_tokens=4, temperature=0).text
    assert expected in res.stdout
