"""A tt_transformers.vllm_registry class served end to end on the emulated mesh.

The fake table's class plans the launch from its own ``model_capabilities`` and, like the real
one (tenstorrent/tt-transformers ``src/tt_transformers/vllm_registry.py`` @ fb8071b3), returns its
generator's own model from ``initialize_vllm_model``: here the plugin's reference Llama.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.tiny_checkpoint import start_worker_and_scheduler, write_tiny_checkpoint
from vllm_tt_plugin.adapter.model_adapter import ModelContractError
from vllm_tt_plugin.model_registry import get_registry
from vllm_tt_plugin.test_models.reference_llama import ReferenceLlamaForCausalLM

TABLE = """
from vllm_tt_plugin.test_models.reference_llama import ReferenceLlamaForCausalLM as _Generator

__all__ = ["ReferenceLlamaForCausalLM"]


class _Narrow(_Generator):
    model_capabilities = {{**_Generator.model_capabilities, "supports_async_decode": False}}


class ReferenceLlamaForCausalLM:
    architecture = "ReferenceLlamaForCausalLM"
    generators = ("tiny",)
    model_capabilities = dict(_Generator.model_capabilities)

    @classmethod
    def initialize_vllm_model(
        cls, hf_config, mesh_device, max_batch_size, max_seq_len, n_layers=None,
        tt_data_parallel=1, optimizations=None, **kwargs,
    ):
        return {generator}.initialize_vllm_model(
            hf_config, mesh_device, max_batch_size, max_seq_len=max_seq_len,
            tt_data_parallel=tt_data_parallel, optimizations=optimizations,
        )
"""


@pytest.fixture(scope="module")
def weights_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("text-registry-weights"))


@pytest.fixture
def table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    pkg = tmp_path / "tt_transformers"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield pkg
    for name in [m for m in sys.modules if m.split(".")[0] == "tt_transformers"]:
        del sys.modules[name]


def _config(make_config: Any, checkpoint: Path) -> Any:
    return make_config(
        model=checkpoint,
        model_class=None,
        tt={"register_test_models": True, "emulated_mesh": True},
        max_num_seqs=4,
        max_model_len=256,
    )


def test_a_table_class_serves_through_its_generator(
    make_config: Any, weights_checkpoint: Path, table: Path
) -> None:
    (table / "vllm_registry.py").write_text(textwrap.dedent(TABLE.format(generator="_Generator")))
    config = _config(make_config, weights_checkpoint)
    served = get_registry().resolve("ReferenceLlamaForCausalLM")
    assert served.source == "tt_transformers", served
    worker, _ = start_worker_and_scheduler(config)
    try:
        model = worker.get_model()
        assert type(model) is ReferenceLlamaForCausalLM  # the generator's own model
        assert worker.served is not None and worker.served.contract_version == 1
        assert any(r.method == "warmup_model_decode" for r in model.call_log)
    finally:
        worker.shutdown()


def test_a_generator_declaring_less_than_its_table_class_is_refused_at_load(
    make_config: Any, weights_checkpoint: Path, table: Path
) -> None:
    (table / "vllm_registry.py").write_text(textwrap.dedent(TABLE.format(generator="_Narrow")))
    config = _config(make_config, weights_checkpoint)
    # Async scheduling was planned from the class: a per-request limit would narrow instead
    # (tests/unit/test_text_registry_generators.py).
    with pytest.raises(ModelContractError, match="supports_async_decode: class True"):
        start_worker_and_scheduler(config)
