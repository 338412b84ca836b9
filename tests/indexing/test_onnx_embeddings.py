"""The ONNX Runtime embedder: torch's vectors without torch, a cache that never serves a
corrupt file, and start-up errors that name the setting. Real model, real files, no mocks."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from indexing.embeddings import BUNDLED_MODEL
from indexing.onnx_cache import OnnxCache, default_cache_dir
from indexing.onnx_embeddings import OnnxEmbedder, cached_model, model_directory
from indexing.sentence_model import read_model_spec
from memory_service.config import load_settings
from memory_service.domain.errors import ConfigurationError
from memory_service.services import build_embedder
from tests.support.server import free_port, wait_healthy

LONG = " ".join(f"The meeting on day {i} covered budgets, hiring and travel." for i in range(80))
TEXTS = [
    "Alice is allergic to peanuts and carries an EpiPen.",
    "Crème brûlée à Paris, naïve café, Straße",
    "我昨天在北京吃了烤鸭，味道非常好。",
    "東京で寿司を食べました",
    "🎉🥳 party at 8pm 🍕🍕",
    "hello",  # one token between [CLS] and [SEP]
    LONG,  # 800+ tokens: truncated to the model's window
    "   leading and trailing spaces   ",
    "",
]


def _torch_model(embedder):
    return getattr(embedder, "_inner", embedder)._model  # the SentenceTransformer itself


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_vectors_match_sentence_transformers_on_torch(onnx, torch_embedder):
    reference = _torch_model(torch_embedder).encode(TEXTS, normalize_embeddings=True)
    batched = onnx.embed(TEXTS)
    assert batched.shape == (len(TEXTS), 384) and batched.dtype == np.float32
    assert _cosines(batched, reference).min() >= 0.9999
    one_by_one = np.vstack([onnx.embed([t]) for t in TEXTS])  # padding changes nothing
    assert _cosines(one_by_one, reference).min() >= 0.9999
    assert np.allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)
    assert onnx.name == torch_embedder.name and onnx.dimension == torch_embedder.dimension


@pytest.mark.slow  # embeds every text alone and in every batch
def test_a_text_gets_its_vector_whatever_it_is_batched_with(onnx):
    """Runs are cut by token length (``indexing.padding``): a text's vector does not depend on
    its neighbours, their order or the cuts, beyond float rounding."""
    short = [f"Fact {i}: Bruno likes {'very ' * (i % 9)}long walks." for i in range(70)]
    texts = [*TEXTS, *short]
    batched = onnx.embed(texts)
    alone = np.vstack([onnx.embed([t]) for t in texts])
    assert _cosines(batched, alone).min() >= 0.99999
    order = np.random.default_rng(3).permutation(len(texts))
    shuffled = onnx.embed([texts[i] for i in order])
    assert _cosines(shuffled, batched[order]).min() >= 0.99999
    assert np.allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)


def test_truncation_is_sentence_transformers_own(onnx, torch_embedder):
    model = _torch_model(torch_embedder)
    features = model.preprocess(TEXTS) if hasattr(model, "preprocess") else model.tokenize(TEXTS)
    ids, mask = features["input_ids"].numpy(), features["attention_mask"].numpy()
    expected = [row[m == 1].tolist() for row, m in zip(ids, mask, strict=True)]
    assert onnx.token_ids(TEXTS) == expected
    assert onnx.max_seq_length == model.max_seq_length == 256
    assert len(onnx.token_ids([LONG])[0]) == 256


def test_int8_is_opt_in_cached_apart_and_named_apart(onnx):
    int8 = OnnxEmbedder(threads=1, quantize=True)
    assert int8.name == f"{onnx.name}#int8"  # its vectors differ: on-disk caches keep apart
    names = sorted(p.name for p in default_cache_dir().glob("*.onnx"))
    assert any(n.endswith("-int8.onnx") for n in names)
    assert any(n.endswith("-fp32.onnx") for n in names)
    cosines = _cosines(int8.embed(TEXTS[:6]), onnx.embed(TEXTS[:6]))
    assert cosines.min() > 0.8  # close, but not the same vectors (measured ~0.96)


@pytest.mark.slow
def test_a_corrupt_cached_model_is_rebuilt_never_served(tmp_path: Path, onnx, torch_embedder):
    cache = tmp_path / "cache"
    cache.mkdir()
    # the bundled MiniLM's own entry: the shared cache may hold other models' files beside it
    built = cached_model(
        read_model_spec(model_directory(BUNDLED_MODEL)),
        OnnxCache(default_cache_dir()),
        quantize=False,
    )
    for source in default_cache_dir().glob(f"{built.name}*"):
        shutil.copy(source, cache / source.name)
    model_file = cache / built.name
    data = bytearray(model_file.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 4096] = bytes(4096)  # same size, wrong weights
    model_file.write_bytes(bytes(data))
    rebuilt = OnnxEmbedder(cache_dir=cache, threads=1)
    assert model_file.read_bytes() != bytes(data)
    key = model_file.name[: -len(".onnx")]
    assert OnnxCache(cache).verified_path(key) is not None  # the new entry verifies
    reference = _torch_model(torch_embedder).encode(TEXTS[:3], normalize_embeddings=True)
    assert _cosines(rebuilt.embed(TEXTS[:3]), reference).min() >= 0.9999


def test_the_cache_verifies_before_it_returns(tmp_path: Path):
    cache, built = OnnxCache(tmp_path / "c"), []

    def build() -> bytes:
        built.append(1)
        return b"model bytes"

    assert cache.get_or_build("k", build).read_bytes() == b"model bytes" and len(built) == 1
    assert cache.get_or_build("k", build).read_bytes() == b"model bytes" and len(built) == 1
    cache.path("k").write_bytes(b"model bytez")  # corrupted in place
    assert cache.verified_path("k") is None
    assert cache.get_or_build("k", build).read_bytes() == b"model bytes" and len(built) == 2
    cache.path("k").with_name("k.onnx.sha256").unlink()  # a crash between the two writes
    assert cache.get_or_build("k", build).read_bytes() == b"model bytes" and len(built) == 3
    assert not [p for p in (tmp_path / "c").iterdir() if p.name.endswith(".tmp")]


def _settings(tmp_path: Path, **embedding):
    return load_settings(workspace=tmp_path / "ws", embedding=embedding)


def _write_model_dir(root: Path, *, modules: list[dict] | None = None) -> Path:
    """A sentence-transformers-shaped folder whose weights are not weights."""
    source = _bundled()
    root.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(source / name, root / name)
    (root / "model.safetensors").write_bytes(b"not a safetensors file")
    if modules is not None:
        (root / "modules.json").write_text(json.dumps(modules))
    return root


def _bundled() -> Path:
    from indexing.embeddings import bundled_model_path

    return bundled_model_path()


@pytest.mark.parametrize(
    ("case", "cause"),
    [
        ("missing", "is not a directory"),
        ("empty", "config.json is missing"),
        ("dense", "not supported by the onnx backend"),
        # the export runs in a python process of its own (indexing.onnx_export)
        pytest.param("bad-weights", "cannot", marks=pytest.mark.subprocess),
    ],
)
def test_a_bad_model_directory_names_the_setting(tmp_path: Path, monkeypatch, case, cause):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    model = tmp_path / "model"
    if case == "empty":
        model.mkdir()
    elif case == "dense":
        modules = [{"type": "sentence_transformers.models.Transformer", "path": ""}]
        modules.append({"type": "sentence_transformers.models.Dense", "path": "2_Dense"})
        _write_model_dir(model, modules=modules)
    elif case == "bad-weights":
        _write_model_dir(model)
    settings = _settings(tmp_path, model=str(model), onnx_cache_dir=str(tmp_path / "cache"))
    with pytest.raises(ConfigurationError) as error:
        build_embedder(settings)
    assert error.value.message.startswith("MEMORY_EMBEDDING__MODEL: ")
    assert cause in error.value.message and str(model) in error.value.message


def test_an_unwritable_cache_folder_names_its_setting(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    (tmp_path / "a-file").write_text("")
    settings = _settings(tmp_path, onnx_cache_dir=str(tmp_path / "a-file" / "onnx"))
    with pytest.raises(ConfigurationError, match=r"^MEMORY_EMBEDDING__ONNX_CACHE_DIR: "):
        build_embedder(settings)


def test_options_the_backend_cannot_honour_name_their_settings(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    with pytest.raises(ConfigurationError, match=r"^MEMORY_EMBEDDING__DEVICE: "):
        build_embedder(_settings(tmp_path, device="cuda"))
    with pytest.raises(ConfigurationError, match=r"^MEMORY_EMBEDDING__QUANTIZE: "):
        build_embedder(_settings(tmp_path, backend="torch", quantize=True))


# --- torch stays out of the serving path -------------------------------------------------------

_CLI_THEN_CHECK = """
import json, sys
from memory_service.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in ("torch", "sentence_transformers", "transformers") if m in sys.modules)
print("MODULES " + json.dumps({"code": code, "heavy": heavy}))
"""


def _env(workspace: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
    env.update(
        HF_HUB_OFFLINE="1", MEMORY_WORKSPACE=str(workspace), MEMORY_EMBEDDING__BACKEND="onnx"
    )
    return env


def _cli(env: dict[str, str], *argv: str) -> tuple[str, dict]:
    done = subprocess.run(
        [sys.executable, "-c", _CLI_THEN_CHECK, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    printed, _, check = done.stdout.rpartition("MODULES ")
    return printed, json.loads(check)


@pytest.mark.subprocess
def test_the_cli_records_and_searches_without_importing_torch(tmp_path: Path):
    env = _env(tmp_path / "ws")
    env["MEMORY_EMBEDDING__ONNX_CACHE_DIR"] = str(tmp_path / "cache")  # the first start exports
    _, check = _cli(env, "record", "--user", "alice", "Alice is allergic to peanuts")
    assert check == {"code": 0, "heavy": []}  # the export ran in a child process
    assert len(list((tmp_path / "cache").glob("*-fp32.onnx"))) == 1
    _cli(env, "record", "--user", "alice", "Alice plays tennis on Sundays")
    printed, check = _cli(env, "search", "--user", "alice", "--json", "peanut allergy")
    assert check == {"code": 0, "heavy": []}
    hits = json.loads(printed)
    assert hits[0]["text"] == "Alice is allergic to peanuts" and hits[0]["ranks"]["dense"] == 1


@pytest.mark.subprocess
def test_serve_answers_a_search_without_loading_torch(tmp_path: Path, onnx):
    """The serving process's mapped libraries (Linux, the platform this service runs on)."""
    port, workspace = free_port(), tmp_path / "ws"
    proc = subprocess.Popen(
        [sys.executable, "-m", "memory_service.cli", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(workspace),
    )
    try:
        banner = proc.stdout.readline()
        key = re.search(r"development key for tenant 'default': (\S+)", banner).group(1)
        base, headers = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {key}"}
        wait_healthy(base, proc)
        facts = {"user_id": "alice", "facts": [{"text": "Alice is allergic to peanuts"}]}
        assert httpx.post(f"{base}/v1/memories", json=facts, headers=headers).status_code == 200
        query = {"user_id": "alice", "query": "peanut allergy", "mode": "dense"}
        hits = httpx.post(f"{base}/v1/memories/search", json=query, headers=headers).json()
        assert hits["hits"][0]["text"] == "Alice is allergic to peanuts"
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        assert "onnxruntime" in maps  # the check would see a shared library if one were loaded
        assert "libtorch" not in maps and "/torch/lib/" not in maps
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# --- the scale bench, both embedders in one run ------------------------------------------------


@pytest.mark.slow
def test_bench_scale_sets_the_embedders_side_by_side(tmp_path: Path, capsys, onnx):
    from memory_service.cli import main

    out, md = tmp_path / "scale.json", tmp_path / "scale.md"
    args = ["bench", "--scale", "30", "--users", "3", "--queries", "4", "--modes", "dense,hybrid"]
    args += ["--embedders", "onnx,torch", "--json", str(out), "--markdown", str(md)]
    assert main([*args, "--no-progress"]) == 0
    doc = json.loads(out.read_text())
    onnx_run, torch_run = doc["embedders"]
    assert (onnx_run["embedder"], torch_run["embedder"]) == ("onnx", "torch")
    assert onnx_run["torch_imported"] is False and torch_run["torch_imported"] is True
    for run in (onnx_run, torch_run):
        assert run["facts"] == 30 and run["peak_rss_mb"] > 0
        assert [r["mode"] for r in run["results"]] == ["dense", "hybrid"]
        assert all(r["http_latency_ms"]["p50"] > 0 for r in run["results"])
    assert doc["results"] == onnx_run["results"]  # the first run is the document's own
    assert "--embedders onnx,torch" in doc["command"]
    printed = capsys.readouterr().out
    assert "embedders side by side" in printed and "torch/onnx" in printed
    assert "hybrid in-process p50 ms" in printed and "| peak RSS MB |" in md.read_text()
