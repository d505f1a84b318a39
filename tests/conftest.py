"""Shared test set-up: a hostless TT environment (host stub ttnn) and real VllmConfigs."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
BUNDLED_MODEL = REPO / "fixtures" / "models" / "tt-reference-llama"

os.environ.setdefault("VLLM_PLUGINS", "tt,tt_model_registry")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")

# Test layers that `pytest tests/` leaves out unless asked for: by naming the layer's directory
# (or a file in it) on the command line, as `tox -e engine` and `tox -e stub-parity` do, or by
# setting the layer's variable to 1. They need what a unit run does not have: live vLLM servers
# on the emulated mesh (minutes), or the real ttnn wheel (tt_host: on Python 3.10, `tox -e
# tt-host`).
OPT_IN_LAYERS: dict[Path, str] = {
    REPO / "tests" / "engine": "TT_ENGINE_TESTS",
    REPO / "tests" / "stub_parity": "TT_STUB_PARITY_TESTS",
    REPO / "tests" / "tt_host": "TT_HOST_TESTS",
}


def _named_on_command_line(layer: Path, config: pytest.Config) -> bool:
    base = Path(config.invocation_params.dir)
    for arg in config.args:
        target = (base / arg.split("::", 1)[0]).resolve()
        if target == layer or layer in target.parents:
            return True
    return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    path = collection_path.resolve()
    for layer, env in OPT_IN_LAYERS.items():
        if path == layer or layer in path.parents:
            if os.environ.get(env) == "1" or _named_on_command_line(layer, config):
                return None
            return True
    return None


TINY_CONFIG: dict[str, Any] = {
    "architectures": ["ReferenceLlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 256,
    "max_position_embeddings": 1024,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float32",
}


def write_checkpoint_config(path: Path, **overrides: Any) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({**TINY_CONFIG, **overrides}))
    return path


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A config-only checkpoint: enough for vLLM to build a VllmConfig (no weights loaded)."""
    return write_checkpoint_config(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def metrics_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private directory for this process's plugin metrics files (tests/unit/metrics_files.py
    reads it as a scrape does)."""
    from vllm_tt_plugin.observability import tt_metrics

    monkeypatch.setenv(tt_metrics.ENV_METRICS_DIR, str(tmp_path))
    monkeypatch.delenv(tt_metrics.PROM_MULTIPROC_ENV, raising=False)
    monkeypatch.delenv(tt_metrics.ENV_METRICS, raising=False)
    monkeypatch.setattr(tt_metrics, "_store_cache", None)
    yield tmp_path
    tt_metrics._store_cache = None


@pytest.fixture
def clean_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Forget the process's TT registry before and after a test that changes the env."""
    from vllm_tt_plugin.model_registry import reset_registry

    for var in (
        "TT_MODEL_CLASS_OVERRIDES",
        "EXTRA_MODELS_DIR",
        "TT_VLLM_BUILTIN_MODELS",
        "TT_LLAMA_TEXT_VER",
        "TT_QWEN3_TEXT_VER",
        "TT_QWEN35_TEXT_VER",
    ):
        monkeypatch.delenv(var, raising=False)
    reset_registry()
    yield
    reset_registry()


@pytest.fixture
def make_config(
    tiny_checkpoint: Path, clean_registry: None, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Any]:
    """Build a real VllmConfig through vLLM's EngineArgs, as `vllm serve` does.

    The model class defaults to a typed fake with every capability (tests/unit/fakes), chosen
    through TT_MODEL_CLASS_OVERRIDES exactly as an operator would.
    """

    def build(
        tt: dict[str, Any] | None = None,
        model_class: str | None = "tests.unit.fakes.models:CapableModel",
        model: Path | None = None,
        **engine_args: Any,
    ) -> Any:
        from vllm.engine.arg_utils import EngineArgs

        from vllm_tt_plugin.model_registry import reset_registry

        if model_class is not None:
            monkeypatch.setenv(
                "TT_MODEL_CLASS_OVERRIDES", f"TTReferenceLlamaForCausalLM={model_class}"
            )
        reset_registry()
        args = EngineArgs(
            model=str(model or tiny_checkpoint),
            skip_tokenizer_init=True,
            additional_config={"tt": tt or {}},
            **engine_args,
        )
        return args.create_engine_config()

    return build
