"""tt-metal's executor-backed generators (``models/common/models/``): every class, refused.

Each class is a thin vLLM adapter whose work is done by an object it holds: an executor
(``self.executor``, the older forms) or an execution target plus a ``VLLMAdapter`` that
normalises the plugin's keywords (``self.target`` / ``self._adapter``, the newest form). None of
them fits this plugin's contract, for the reason its form gives (read at the tenstorrent/tt-metal
commits named below; docs/TT_MODEL_CONTRACT.md, "Refused at launch", and docs/CONTRACT_PARITY.md
cite each file). ``model_registry`` makes every class reachable by override only and refuses it at
launch, so none is half-served.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Form = Literal["composition", "builder", "facade"]

_PKG = "models.common.models"

# One sentence per form, completed with the class's own commit.
_WHY: dict[Form, str] = {
    "composition": (
        "its initialize_vllm_model(cls, hf_config, mesh_device, max_batch_size, max_seq_len, "
        "n_layers=None, optimizations='performance') takes no tt_data_parallel, which the plugin "
        "sends on every load (a TypeError before any other call); prefill, decode, allocation and "
        "the prefill warm-up hand all their arguments to self.executor (composition), and the "
        "class defines no read_decode_output / process_decode_output_host"
    ),
    "builder": (
        "it defines no initialize_vllm_model (it is built by from_pretrained(mesh_device, "
        "gen_cfg)), so the plugin cannot load it; prefill, decode and allocation hand their "
        "arguments to self.executor"
    ),
    "facade": (
        "it declares supports_sample_on_device and no supports_device_penalties (so device "
        "penalties are on) but its decode_forward takes prompt_tokens and output_tokens into "
        "**compatibility_kwargs, which VLLMAdapter discards (_IGNORED_VLLM_KWARGS in "
        "models/common/llm_runtime/vllm_adapter.py): repetition, presence and frequency "
        "penalties would be dropped silently; every call is then handed to self.target with an "
        "execution object, a calling convention this contract does not describe"
    ),
}


@dataclass(frozen=True)
class ExecutorGenerator:
    """One executor-backed generator class tt-metal ships, as read at ``commit``."""

    target: str  # "module.path:ClassName"
    archs: tuple[str, ...]  # the TT architectures it would serve
    form: Form
    commit: str  # tenstorrent/tt-metal commit of the newest version read

    @property
    def reason(self) -> str:
        return f"{_WHY[self.form]} (tenstorrent/tt-metal @ {self.commit[:8]})"


_LLAMA = ("TTLlamaForCausalLM",)
_QWEN2 = ("TTQwen2ForCausalLM",)

EXECUTOR_GENERATORS: tuple[ExecutorGenerator, ...] = (
    ExecutorGenerator(
        f"{_PKG}.generator:Llama3Generator",
        _LLAMA,
        "composition",
        "c25dcdae9742da7619871bcc50a359d3c4f9e1a1",
    ),
    ExecutorGenerator(
        f"{_PKG}.llama3_1b.generator:Llama1BGenerator",
        _LLAMA,
        "composition",
        "206463211ffcc6290b5c93ee8a7552f1cea4ffa3",
    ),
    ExecutorGenerator(
        f"{_PKG}.llama32_1b.generator:Llama32_1BGenerator",
        _LLAMA,
        "builder",
        "01c8afed5a09a5fdd7c3ddbe0167f81b9607feb3",
    ),
    ExecutorGenerator(
        f"{_PKG}.llama3_8b.generator:Llama3Generator",
        _LLAMA,
        "facade",
        "3514349e4c88d6b2ea16ac821f6c1cc1be6a4bf2",
    ),
    ExecutorGenerator(
        f"{_PKG}.llama32_3b.generator:Llama32_3BGenerator",
        _LLAMA,
        "facade",
        "3dfeae9445a24e18e75ff2de2313c7a30bfe2bcf",
    ),
    ExecutorGenerator(
        f"{_PKG}.llama33_70b.generator:Llama33_70BGenerator",
        _LLAMA,
        "facade",
        "6ce5d3927e1a589cd1ff4a3e904683a4b0f7a4a2",
    ),
    ExecutorGenerator(
        f"{_PKG}.mistral_7b.generator:Mistral7BGenerator",
        ("TTMistralForCausalLM",),
        "facade",
        "40b8b7d856d5a5c665bbb7a3bc90d75a238dfd19",
    ),
    ExecutorGenerator(
        f"{_PKG}.phi4.generator:Phi4Generator",
        ("TTPhi3ForCausalLM",),  # microsoft/phi-4's checkpoint names Phi3ForCausalLM
        "facade",
        "6ce5d3927e1a589cd1ff4a3e904683a4b0f7a4a2",
    ),
    ExecutorGenerator(
        f"{_PKG}.qwen25_7b.generator:Qwen25Generator",
        _QWEN2,
        "facade",
        "6ce5d3927e1a589cd1ff4a3e904683a4b0f7a4a2",
    ),
    ExecutorGenerator(
        f"{_PKG}.qwen25_72b.generator:Qwen25_72BGenerator",
        _QWEN2,
        "facade",
        "6ce5d3927e1a589cd1ff4a3e904683a4b0f7a4a2",
    ),
    ExecutorGenerator(
        f"{_PKG}.qwen25_coder_32b.generator:Qwen25Coder32BGenerator",
        _QWEN2,
        "facade",
        "6ce5d3927e1a589cd1ff4a3e904683a4b0f7a4a2",
    ),
    ExecutorGenerator(
        f"{_PKG}.qwen2_7b.generator:Qwen2Generator",
        _QWEN2,
        "facade",
        "6ce5d3927e1a589cd1ff4a3e904683a4b0f7a4a2",
    ),
    ExecutorGenerator(
        f"{_PKG}.deepseek_r1_distill_qwen_14b.generator:DeepSeekR1Qwen14BGenerator",
        _QWEN2,
        "facade",
        "6ce5d3927e1a589cd1ff4a3e904683a4b0f7a4a2",
    ),
    ExecutorGenerator(
        f"{_PKG}.qwen3_32b.generator:Qwen3_32BGenerator",
        ("TTQwen3ForCausalLM",),
        "facade",
        "6ce5d3927e1a589cd1ff4a3e904683a4b0f7a4a2",
    ),
)
