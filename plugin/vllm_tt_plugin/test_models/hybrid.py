"""Hybrid attention for the reference model: which layers slide, and vLLM's per-layer KV specs.

A hybrid checkpoint (``fixtures/models/tt-reference-hybrid``, HF ``SmolLM3ForCausalLM``) names each
layer's attention in ``layer_types``: ``"sliding_attention"`` layers attend to the last
``sliding_window`` positions, ``"full_attention"`` layers to all. transformers 5.x masks with
``kv_idx > q_idx - sliding_window``, so the query at position p sees p - window + 1 .. p; the
paged attention in ``paged_kv.py`` uses exactly that window, and its page-table check demands
real blocks only inside it, because vLLM's sliding-window manager frees the blocks before it
(the scheduler's table then holds the null block 0; the runner's may keep stale ids).

``get_kv_cache_spec`` gives vLLM one spec per layer, named as the plugin names layers
(``kv_cache.layer_name``), so its hybrid KV cache manager packs a sliding group and a full
group. The model's math is Llama's: every layer must use RoPE (SmolLM3's ``no_rope_layers`` all
1) and a checkpoint with q/k/v biases (Qwen2's) must have them zero (both checked).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheSpec, SlidingWindowSpec

from vllm_tt_plugin.adapter.kv_cache import DEFAULT_KV_DTYPE, layer_index, layer_name
from vllm_tt_plugin.test_models.llama import ReferenceModelConfigError

if TYPE_CHECKING:
    from vllm.config import VllmConfig

SLIDING = "sliding_attention"
FULL = "full_attention"
LAYER_TYPES = (SLIDING, FULL)


def text_config(hf_config: Any) -> Any:
    """The language-model config (multimodal configs nest it as ``text_config``)."""
    getter = getattr(hf_config, "get_text_config", None)
    return getter() if callable(getter) else hf_config


@dataclass(frozen=True)
class HybridLayers:
    """Per-layer attention windows: an int for a sliding layer, None for a full one."""

    windows: tuple[int | None, ...]

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> HybridLayers:
        config = text_config(hf_config)
        types = getattr(config, "layer_types", None)
        num_layers = getattr(config, "num_hidden_layers", None)
        if not isinstance(types, (list, tuple)) or not types:
            raise ReferenceModelConfigError(
                f"hf_config.layer_types={types!r}: the hybrid reference model needs one of "
                f"{LAYER_TYPES} per layer"
            )
        if len(types) != num_layers:
            raise ReferenceModelConfigError(
                f"hf_config.layer_types has {len(types)} entries but num_hidden_layers={num_layers}"
            )
        for index, kind in enumerate(types):
            if kind not in LAYER_TYPES:
                raise ReferenceModelConfigError(
                    f"hf_config.layer_types[{index}]={kind!r} is not one of {LAYER_TYPES}"
                )
        no_rope = getattr(config, "no_rope_layers", None) or ()
        for index, uses_rope in enumerate(no_rope):
            if not uses_rope:
                raise ReferenceModelConfigError(
                    f"hf_config.no_rope_layers[{index}]={uses_rope!r}: the hybrid reference model "
                    "applies RoPE in every layer (NoPE layers are not implemented)"
                )
        window = getattr(config, "sliding_window", None)
        if SLIDING in types and getattr(config, "use_sliding_window", True) is False:
            raise ReferenceModelConfigError(
                f"hf_config.use_sliding_window=False but layer_types has {SLIDING!r} layers: "
                "transformers applies no window then; set it true or list only full layers"
            )
        if SLIDING in types and (
            isinstance(window, bool) or not isinstance(window, int) or window < 1
        ):
            raise ReferenceModelConfigError(
                f"hf_config.sliding_window={window!r} but layer_types has {SLIDING!r} layers: "
                "it must be a positive int"
            )
        return cls(tuple(window if kind == SLIDING else None for kind in types))

    @property
    def num_layers(self) -> int:
        return len(self.windows)

    def kv_cache_spec(self, vllm_config: VllmConfig) -> dict[str, KVCacheSpec]:
        """One vLLM spec per layer, keyed by the plugin's layer names."""
        model_config = vllm_config.model_config
        num_layers = model_config.get_num_layers(vllm_config.parallel_config)
        if num_layers != self.num_layers:
            raise ReferenceModelConfigError(
                f"vLLM counts {num_layers} layers but layer_types lists {self.num_layers}"
            )
        common: dict[str, Any] = {
            "block_size": vllm_config.cache_config.block_size,
            "num_kv_heads": model_config.get_total_num_kv_heads(),
            "head_size": model_config.get_head_size(),
            "dtype": DEFAULT_KV_DTYPE,  # the plugin's byte-budget unit, as for uniform models
        }
        specs: dict[str, KVCacheSpec] = {}
        for index, window in enumerate(self.windows):
            if window is None:
                specs[layer_name(index)] = FullAttentionSpec(**common)
            else:
                specs[layer_name(index)] = SlidingWindowSpec(**common, sliding_window=window)
        return specs


def check_zero_attention_biases(raw: Mapping[str, torch.Tensor], path: Path) -> None:
    """Qwen2 checkpoints carry q/k/v biases; this model implements Llama math, so they must be 0.
    ``raw``: the checkpoint's tensors, read from ``path``."""
    for name, tensor in raw.items():
        if not name.endswith(("q_proj.bias", "k_proj.bias", "v_proj.bias")):
            continue
        peak = float(tensor.abs().max())
        if peak != 0.0:
            raise ReferenceModelConfigError(
                f"{path}: {name} is nonzero (max |b| = {peak:g}); the hybrid reference "
                "model implements Llama math and needs zero q/k/v biases"
            )


def vllm_layer_groups(vllm_config: VllmConfig, specs: dict[str, KVCacheSpec]) -> tuple[int, ...]:
    """The KV cache group of each layer, as vLLM's KV cache manager groups ``specs``."""
    from vllm.v1.core import kv_cache_utils

    groups = kv_cache_utils.get_kv_cache_groups(vllm_config, dict(specs))
    group_of: dict[int, int] = {}
    for g, group in enumerate(groups):
        for name in group.layer_names:
            group_of[layer_index(name)] = g
    return tuple(group_of[i] for i in range(len(group_of)))
