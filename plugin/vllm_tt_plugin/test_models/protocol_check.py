"""The reference models satisfy the TT model contract Protocols (``contract/protocols.py``).

Never called: strict mypy (``tox -e lint``, docs/TYPING.md) checks these conversions, so a
reference class whose signature drifts from the contract fails the type check, as a tt-metal
class would fail the adapter's binding.
"""

from __future__ import annotations

from vllm_tt_plugin.contract.protocols import (
    TTAsyncReadback,
    TTHybridModelClass,
    TTKVAllocator,
    TTModel,
    TTModelClass,
    TTWarmup,
)
from vllm_tt_plugin.test_models.reference_block import ReferenceBlockForCausalLM
from vllm_tt_plugin.test_models.reference_llama import (
    ReferenceHybridForCausalLM,
    ReferenceLlamaForCausalLM,
)
from vllm_tt_plugin.test_models.reference_qwen2vl import ReferenceQwen2VLForConditionalGeneration
from vllm_tt_plugin.test_models.reference_vision import ReferenceLlavaForConditionalGeneration


def model_classes(
    llama: type[ReferenceLlamaForCausalLM],
    block: type[ReferenceBlockForCausalLM],
    llava: type[ReferenceLlavaForConditionalGeneration],
    qwen2vl: type[ReferenceQwen2VLForConditionalGeneration],
    hybrid: type[ReferenceHybridForCausalLM],
) -> tuple[TTModelClass, TTModelClass, TTModelClass, TTModelClass, TTHybridModelClass]:
    return llama, block, llava, qwen2vl, hybrid


def models(
    llama: ReferenceLlamaForCausalLM,
    block: ReferenceBlockForCausalLM,
    llava: ReferenceLlavaForConditionalGeneration,
    qwen2vl: ReferenceQwen2VLForConditionalGeneration,
) -> tuple[TTModel, TTModel, TTModel, TTModel]:
    return llama, block, llava, qwen2vl


def optional_parts(
    llama: ReferenceLlamaForCausalLM, block: ReferenceBlockForCausalLM
) -> tuple[TTKVAllocator, TTKVAllocator, TTAsyncReadback, TTWarmup, TTWarmup]:
    return llama, block, llama, llama, block
