"""Stand-in for tenstorrent/tt-transformers ``src/tt_transformers/vllm_registry.py``.

The interface of db0b69c315f3a931e518de6ca999bf3ed54f73c2 (fb8071b3 differs only in taking
``resolve_hf_id`` from ``cache_environment``): ``__all__``; ``GeneratorEntry(hf_id, package,
generator)`` whose ``load()`` imports the generator class; one class per architecture whose
``model_capabilities`` hold only what every generator of it shares (no ``max_device_top_k``, no
``supports_device_penalties``), whose ``generators`` table is the real one, and whose classmethod
``initialize_vllm_model`` selects a generator by the checkpoint's Hugging Face id and returns what
that generator's ``initialize_vllm_model`` returns. Only three of the generator modules exist
here (``tt_transformers.models.{llama3_8b,phi4,llama32_1b}``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, ClassVar

__all__ = [
    "GeneratorEntry",
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Phi3ForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "UnsupportedModelError",
    "resolve_hf_id",
]


class UnsupportedModelError(ValueError):
    """The checkpoint names no model of this table."""


@dataclass(frozen=True)
class GeneratorEntry:
    hf_id: str
    package: str
    generator: str  # "module:Class", imported by load()

    def load(self) -> Any:
        module, _, name = self.generator.partition(":")
        return getattr(importlib.import_module(module), name)


def _entry(hf_id: str, package: str, name: str) -> GeneratorEntry:
    return GeneratorEntry(hf_id, package, f"tt_transformers.models.{package}.vllm_generator:{name}")


def resolve_hf_id(name_or_path: str | None) -> str | None:
    """``org/name`` as given, or read from a Hugging Face cache snapshot directory
    (``.../models--org--name/snapshots/<rev>``); None for anything else."""
    if not name_or_path:
        return None
    text = str(name_or_path)
    parts = PurePosixPath(text).parts
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        org_name = parts[-3].removeprefix("models--").split("--")
        return "/".join(org_name) if len(org_name) == 2 and all(org_name) else None
    if text.count("/") == 1 and not text.startswith(("/", ".", "~")) and all(text.split("/")):
        return text
    return None


_SHARED_CAPABILITIES: dict[str, Any] = {
    "supports_prefix_caching": True,
    "supports_async_decode": True,
    "supports_sample_on_device": True,
    "accepts_trace_mode": True,
}


class _ArchitectureDispatcher:
    architecture: ClassVar[str]
    generators: ClassVar[tuple[GeneratorEntry, ...]]
    model_capabilities: ClassVar[dict[str, Any]] = _SHARED_CAPABILITIES

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.model_capabilities = dict(cls.model_capabilities)

    @classmethod
    def supported_hf_ids(cls) -> tuple[str, ...]:
        return tuple(entry.hf_id for entry in cls.generators)

    @classmethod
    def select(cls, name_or_path: str | None) -> GeneratorEntry:
        hf_id = resolve_hf_id(name_or_path)
        for entry in cls.generators:
            if entry.hf_id == hf_id:
                return entry
        raise UnsupportedModelError(
            f"{name_or_path!r} is not served as {cls.architecture}; "
            f"supported: {', '.join(cls.supported_hf_ids())}"
        )

    @classmethod
    def get_max_tokens_all_users(
        cls,
        model_name: str = "",
        num_devices: int = 1,
        tt_data_parallel: int = 1,
        max_model_len: int = 0,
        max_num_seqs: int = 1,
    ) -> int:
        generator = cls.select(model_name).load()
        return int(
            generator.get_max_tokens_all_users(
                model_name=model_name,
                num_devices=num_devices,
                tt_data_parallel=tt_data_parallel,
                max_model_len=max_model_len,
                max_num_seqs=max_num_seqs,
            )
        )

    @classmethod
    def initialize_vllm_model(
        cls,
        hf_config: Any,
        mesh_device: Any,
        max_batch_size: int,
        max_seq_len: int,
        n_layers: int | None = None,
        tt_data_parallel: int = 1,
        optimizations: str | None = None,
        **kwargs: Any,
    ) -> Any:
        generator = cls.select(getattr(hf_config, "_name_or_path", None)).load()
        if optimizations is not None:
            kwargs["optimizations"] = optimizations
        return generator.initialize_vllm_model(
            hf_config,
            mesh_device,
            max_batch_size,
            max_seq_len,
            n_layers=n_layers,
            tt_data_parallel=tt_data_parallel,
            **kwargs,
        )


class LlamaForCausalLM(_ArchitectureDispatcher):
    architecture = "LlamaForCausalLM"
    generators = (
        _entry("meta-llama/Llama-3.2-1B-Instruct", "llama32_1b", "Llama32_1BGenerator"),
        _entry("meta-llama/Llama-3.2-3B-Instruct", "llama32_3b", "Llama32_3BGenerator"),
        _entry("meta-llama/Llama-3.1-8B-Instruct", "llama3_8b", "Llama3Generator"),
        _entry("meta-llama/Llama-3.3-70B-Instruct", "llama33_70b", "Llama33_70BGenerator"),
    )


class Qwen2ForCausalLM(_ArchitectureDispatcher):
    architecture = "Qwen2ForCausalLM"
    generators = (
        _entry("Qwen/Qwen2-7B-Instruct", "qwen2_7b", "Qwen2Generator"),
        _entry("Qwen/Qwen2.5-7B-Instruct", "qwen25_7b", "Qwen25Generator"),
        _entry("Qwen/Qwen2.5-Coder-32B-Instruct", "qwen25_coder_32b", "Qwen25Coder32BGenerator"),
        _entry("Qwen/Qwen2.5-72B-Instruct", "qwen25_72b", "Qwen25_72BGenerator"),
        _entry(
            "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B",
            "deepseek_r1_distill_qwen_14b",
            "DeepSeekR1Qwen14BGenerator",
        ),
    )


class Qwen3ForCausalLM(_ArchitectureDispatcher):
    architecture = "Qwen3ForCausalLM"
    generators = (_entry("Qwen/Qwen3-32B", "qwen3_32b", "Qwen3_32BGenerator"),)


class MistralForCausalLM(_ArchitectureDispatcher):
    architecture = "MistralForCausalLM"
    generators = (_entry("mistralai/Mistral-7B-Instruct-v0.3", "mistral_7b", "Mistral7BGenerator"),)


class Phi3ForCausalLM(_ArchitectureDispatcher):
    architecture = "Phi3ForCausalLM"
    generators = (_entry("microsoft/phi-4", "phi4", "Phi4Generator"),)
