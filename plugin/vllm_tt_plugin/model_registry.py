"""Which class serves each TT architecture.

Three sources, consulted in this order; the first one that names an architecture wins for the
whole process:

1. ``TT_MODEL_CLASS_OVERRIDES`` -- ``Arch=module.path:Class[,...]`` for one launch;
2. ``EXTRA_MODELS_DIR`` bundles -- ``<dir>/<bundle>/vllm_metadata.json``;
3. the built-in map (``TT_VLLM_BUILTIN_MODELS=0`` disables it): first tt-transformers' own table
   of text architectures, ``tt_transformers.vllm_registry``, when it is importable
   (``launch.text_registry``; a family selector set to a non-default value still wins for its
   architecture), then the plugin's table of tt-metal classes, with ``TT_LLAMA_TEXT_VER`` /
   ``TT_QWEN3_TEXT_VER`` / ``TT_QWEN35_TEXT_VER`` choosing within a family.

The plugin's reference test models come last and only when ``register_test_models`` is true.
Targets are ``"module:Class"`` strings and are imported only when that architecture is served.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from vllm_tt_plugin.launch import envs, text_registry
from vllm_tt_plugin.launch.executor_family import EXECUTOR_GENERATORS
from vllm_tt_plugin.utils.log import get_logger

logger = get_logger(__name__)

TT_PREFIX = "TT"
Source = Literal["override", "bundle", "tt_transformers", "builtin", "test"]

# Real tt-metal module paths (docs/TT_MODEL_CONTRACT.md, "Registry targets").
_TT_TRANSFORMERS = "models.tt_transformers.tt.generator_vllm"
_LLAMA_GALAXY = "models.demos.llama3_70b_galaxy.tt.generator_vllm"
_GEMMA4 = "models.demos.gemma4.tt.generator_vllm:Gemma4ForCausalLM"
_LLAMA2_70B_T3000 = "models.demos.t3000.llama2_70b.tt.generator_vllm:TtLlamaForCausalLM"
_LLAMA31_8B_QB2 = "models.demos.llama31_8b_qb2.tt.generator_vllm:LlamaForCausalLM"
_DIFFUSION_GEMMA = "models.experimental.diffusion_gemma.tt.generator_vllm:DiffusionGemmaForCausalLM"
_GEMMA4_31B_QB2 = "models.demos.gemma4_31b_qb2.tt.generator_vllm:Gemma4ForCausalLM"
_QWEN36 = "models.demos.blackhole.qwen36.tt"
# Classes tt-metal ships that the built-in map does not serve by default (docs/CONTRACT_PARITY.md
# cites the commit of each). They are reached through TT_MODEL_CLASS_OVERRIDES or a bundle, and
# the parity check covers them like the built-ins.
_GEMMA4_26B_AUTOPORT = (
    "models.autoports.google_gemma_4_26b_a4b_it.tt.generator_vllm:Gemma4ForCausalLM"
)
_QWEN36_27B_AUTOPORT = "models.autoports.qwen_qwen3_6_27b.tt.generator_vllm:Qwen36ForCausalLM"
_QWEN35_BLACKHOLE = f"{_QWEN36}.qwen35_vllm:Qwen35ForCausalLM"
_QWEN36_DFLASH = f"{_QWEN36}.qwen36_vllm_dflash:Qwen36DFlashForCausalLM"
_DEEPSEEK_TT_TRANSFORMERS = (
    "models.tt_transformers.tt.generator_deepseek_vllm:DeepseekV3ForCausalLM"
)

# Family version selectors: env var -> {version: {arch: (target, lane_dp)}}. The first version
# listed is the default (also taken when the variable is unset or empty).
_SELECTORS: dict[str, dict[str, dict[str, tuple[str, bool]]]] = {
    "TT_LLAMA_TEXT_VER": {
        "tt_transformers": {"TTLlamaForCausalLM": (f"{_TT_TRANSFORMERS}:LlamaForCausalLM", False)},
        "llama3_70b_galaxy": {"TTLlamaForCausalLM": (f"{_LLAMA_GALAXY}:LlamaForCausalLM", True)},
        "llama2_70b": {
            # Refused at launch (UNSERVABLE_TARGETS): its load and prefill forms do not fit.
            "TTLlamaForCausalLM": (_LLAMA2_70B_T3000, False)
        },
        # Llama 3.1 8B on a Blackhole QuietBox 2 (TP4, decode contract 1, device sampling
        # without device penalties); standard DP: it requires tt_data_parallel 1.
        "llama31_8b_qb2": {"TTLlamaForCausalLM": (_LLAMA31_8B_QB2, False)},
    },
    "TT_QWEN3_TEXT_VER": {
        "tt_transformers": {"TTQwen3ForCausalLM": (f"{_TT_TRANSFORMERS}:QwenForCausalLM", False)},
        "qwen3_32b_galaxy": {"TTQwen3ForCausalLM": (f"{_LLAMA_GALAXY}:QwenForCausalLM", True)},
    },
    "TT_QWEN35_TEXT_VER": {
        # Standard DP, not lanes: the spec reserves lanes for the two single-execute Galaxy
        # generators (llama3_70b_galaxy, qwen3_32b_galaxy) and GPT-OSS.
        "qwen36_blackhole": {
            "TTQwen3_5ForConditionalGeneration": (
                "models.demos.blackhole.qwen36.tt.qwen36_vllm:Qwen36ForCausalLM",
                False,
            )
        },
    },
}

# Architectures outside the version-selected families: arch -> (target, lane_dp).
_BUILTIN_FIXED: dict[str, tuple[str, bool]] = {
    "TTQwen2ForCausalLM": (f"{_TT_TRANSFORMERS}:QwenForCausalLM", False),
    "TTMistralForCausalLM": (f"{_TT_TRANSFORMERS}:MistralForCausalLM", False),
    "TTMllamaForConditionalGeneration": (
        f"{_TT_TRANSFORMERS}:MllamaForConditionalGeneration",
        False,
    ),
    "TTGemma3ForConditionalGeneration": (
        f"{_TT_TRANSFORMERS}:Gemma3ForConditionalGeneration",
        False,
    ),
    "TTMistral3ForConditionalGeneration": (
        f"{_TT_TRANSFORMERS}:Mistral3ForConditionalGeneration",
        False,
    ),
    "TTQwen2_5_VLForConditionalGeneration": (
        "models.demos.qwen25_vl.tt.generator_vllm:Qwen2_5_VLForConditionalGeneration",
        False,
    ),
    "TTQwen3VLForConditionalGeneration": (
        "models.demos.qwen3_vl.tt.generator_vllm:Qwen3VLForConditionalGeneration",
        False,
    ),
    # Gemma 4 is text-only on TT: every Gemma 4 architecture, multimodal names included, is
    # served by the one text class.
    "TTGemma4ForCausalLM": (_GEMMA4, False),
    "TTGemma4ForConditionalGeneration": (_GEMMA4, False),
    "TTGemma4UnifiedForConditionalGeneration": (_GEMMA4, False),
    "TTDiffusionGemmaForBlockDiffusion": (_DIFFUSION_GEMMA, False),
    "TTDiffusionGemmaForCausalLM": (_DIFFUSION_GEMMA, False),
    "TTDeepseekV3ForCausalLM": (
        "models.demos.deepseek_v3.tt.generator_vllm:DeepseekV3ForCausalLM",
        False,
    ),
    "TTGptOssForCausalLM": (f"{_TT_TRANSFORMERS}:GptOssForCausalLM", True),
    # Gemma 4 31B on a Blackhole QuietBox 2, under the architecture its vllm_metadata.json names
    # (Gemma4QB2ForCausalLM); refused at launch (UNSERVABLE_TARGETS).
    "TTGemma4QB2ForCausalLM": (_GEMMA4_31B_QB2, False),
}

# TT classes reachable through TT_MODEL_CLASS_OVERRIDES or a bundle, not built in: target ->
# the architectures it would serve. Covered by the parity check (all_builtin_targets).
KNOWN_TARGETS: dict[str, tuple[str, ...]] = {
    _GEMMA4_26B_AUTOPORT: ("TTGemma4ForCausalLM", "TTGemma4ForConditionalGeneration"),
    _QWEN36_27B_AUTOPORT: ("TTQwen3_5ForConditionalGeneration",),
    _QWEN35_BLACKHOLE: ("TTQwen3_5ForConditionalGeneration",),
    _QWEN36_DFLASH: ("TTQwen3_5ForConditionalGeneration",),
    _DEEPSEEK_TT_TRANSFORMERS: ("TTDeepseekV3ForCausalLM",),
    # tt-metal's executor-backed generators (models/common/models/), every one refused below.
    **{g.target: g.archs for g in EXECUTOR_GENERATORS},
}


# Architectures no TT class can serve on this vLLM, whatever source registers them: arch -> why
# (the evidence, with vLLM 0.26.0 file:line, is in docs/TT_MODEL_CONTRACT.md, "Refused at launch").
UNSERVABLE_ARCHS: dict[str, str] = {
    "TTMllamaForConditionalGeneration": (
        "vLLM 0.26.0 dropped MllamaForConditionalGeneration after v0.10.2 with V0's "
        "encoder-decoder path (vllm/model_executor/models/registry.py:737-740), and its V1 "
        "engine has no Mllama processor and allocates no cross-attention KV cache for it (the "
        "checkpoint falls to the Transformers backend, decoder self-attention only: "
        "vllm/model_executor/models/transformers/base.py:536-543)"
    ),
}

# Classes whose calls do not fit the TT model contract, from any source: target -> (the selector
# that offers it built in, or "" when none does, why).
UNSERVABLE_TARGETS: dict[str, tuple[str, str]] = {
    _LLAMA2_70B_T3000: (
        "TT_LLAMA_TEXT_VER=llama2_70b",
        "its initialize_vllm_model(cls, hf_config, mesh_device, max_batch_size) takes none of "
        "max_seq_len, tt_data_parallel, optimizations and its prefill_forward(self, tokens, "
        "page_table, kv_cache, prompt_lens) none of enable_trace, start_pos, empty_slots, "
        "which the plugin sends on every load and prefill",
    ),
    # The reasons below are read from the public files at the commits docs/CONTRACT_PARITY.md
    # names (the skeleton trees under fixtures/tt_metal/skeletons/).
    _GEMMA4_31B_QB2: (
        "",
        "its get_kv_cache_spec imports WholePromptSlidingWindowSpec and "
        "validate_whole_prompt_cache from vllm_tt_plugin.whole_prompt_cache, a module of another "
        "TT plugin that this plugin does not ship (an ImportError at the first KV-cache spec)",
    ),
    _GEMMA4_26B_AUTOPORT: (
        "",
        "it declares no supports_device_penalties (so device penalties are on) but its "
        "decode_forward takes prompt_tokens and output_tokens into **_ and never reads them: "
        "repetition, presence and frequency penalties would be dropped silently",
    ),
    _QWEN36_27B_AUTOPORT: (
        "",
        "it registers Qwen3-VL's multimodal processor, so vLLM accepts images, but its "
        "prefill_forward takes pixel_values and image_grid_thw into **_ and never reads them: "
        "image inputs would be ignored silently",
    ),
    _QWEN36_DFLASH: (
        "",
        "its model_capabilities declare an adaptive block-output contract "
        "(tt_adaptive_block_output, tt_adaptive_block_max_prompt_tokens, "
        "tt_block_output_kv_lookahead_tokens: a block only on solo decode steps) that this "
        "plugin does not implement; it would plan every step as a fixed output_tokens_per_step "
        "block",
    ),
    _DEEPSEEK_TT_TRANSFORMERS: (
        "",
        "its initialize_vllm_model(cls, hf_config, mesh_device, max_batch_size, max_seq_len, "
        "n_layers=None, tt_data_parallel=1) takes no optimizations, which the plugin sends on "
        "every load",
    ),
    # Every executor-backed generator, by its form (launch/executor_family.py).
    **{g.target: ("", g.reason) for g in EXECUTOR_GENERATORS},
}


# Also registered with vLLM under the checkpoint's plain name: vLLM inspects the un-prefixed
# architecture before the platform rewrites it, and for these it would otherwise find its own
# (multimodal or block-diffusion) implementation and configure the engine for that.
PLAIN_NAME_ARCHS: tuple[str, ...] = (
    "Gemma4ForCausalLM",
    "Gemma4ForConditionalGeneration",
    "Gemma4UnifiedForConditionalGeneration",
    "DiffusionGemmaForBlockDiffusion",
    "DiffusionGemmaForCausalLM",
)

# The plugin's reference test models (register_test_models): HF arch of the checkpoint -> target.
_TEST_MODELS: dict[str, tuple[str, bool]] = {
    "TTReferenceLlamaForCausalLM": (
        "vllm_tt_plugin.test_models.reference_llama:ReferenceLlamaForCausalLM",
        False,
    ),
    "TTReferenceLlamaLanesForCausalLM": (
        "vllm_tt_plugin.test_models.reference_llama:ReferenceLlamaLanesForCausalLM",
        True,
    ),
    "TTReferenceHybridForCausalLM": (
        "vllm_tt_plugin.test_models.reference_llama:ReferenceHybridForCausalLM",
        False,
    ),
    "TTReferenceLlavaForConditionalGeneration": (
        "vllm_tt_plugin.test_models.reference_vision:ReferenceLlavaForConditionalGeneration",
        False,
    ),
    "TTReferenceQwen2VLForConditionalGeneration": (
        "vllm_tt_plugin.test_models.reference_qwen2vl:ReferenceQwen2VLForConditionalGeneration",
        False,
    ),
    "TTReferenceBlockForCausalLM": (
        "vllm_tt_plugin.test_models.reference_block:ReferenceBlockForCausalLM",
        False,
    ),
}

# vLLM's ModelConfig inspects the checkpoint's (un-prefixed) architecture before the platform
# rewrites it, so the reference checkpoints' HF names are aliased to vLLM's own implementation
# of the same architecture. Nothing ever runs through these aliases.
TEST_CHECKPOINT_ALIASES: dict[str, str] = {
    "ReferenceLlamaForCausalLM": "vllm.model_executor.models.llama:LlamaForCausalLM",
    "ReferenceLlamaLanesForCausalLM": "vllm.model_executor.models.llama:LlamaForCausalLM",
    # A SmolLM3 checkpoint with Llama's math; vLLM has no SmolLM3 class of its own.
    "ReferenceHybridForCausalLM": "vllm.model_executor.models.llama:LlamaForCausalLM",
    # The block-output reference serves the bundled Llama checkpoint (--hf-overrides).
    "ReferenceBlockForCausalLM": "vllm.model_executor.models.llama:LlamaForCausalLM",
    # vLLM's own LLaVA module imports torchvision (through Pixtral): an inspection-only class.
    "ReferenceLlavaForConditionalGeneration": (
        "vllm_tt_plugin.test_models.reference_vision:ReferenceLlavaInspection"
    ),
    # vLLM's own Qwen2-VL module imports torchvision too.
    "ReferenceQwen2VLForConditionalGeneration": (
        "vllm_tt_plugin.test_models.reference_qwen2vl:ReferenceQwen2VLInspection"
    ),
}


class RegistryError(ValueError):
    """A registration source is malformed, or an architecture has no TT class."""


@dataclass(frozen=True)
class ModelTarget:
    """The class that serves one TT-prefixed architecture."""

    arch: str
    target: str  # "module.path:ClassName"
    source: Source
    # Served as single-process lanes when --data_parallel_size > 1 (Galaxy generators, GPT-OSS).
    lane_data_parallel: bool = False

    def load_class(self) -> type:
        module_name, _, class_name = self.target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise RegistryError(
                f"Cannot import {module_name!r} for TT architecture {self.arch} "
                f"(from {self.source}); it must be importable in the worker process, "
                f"e.g. tt-metal's models/ tree on PYTHONPATH: {exc}"
            ) from exc
        try:
            model_cls: type = getattr(module, class_name)
            return model_cls
        except AttributeError as exc:
            raise RegistryError(
                f"Module {module_name!r} has no class {class_name!r} "
                f"(TT architecture {self.arch}, from {self.source})"
            ) from exc


def tt_arch(arch: str) -> str:
    """The TT-prefixed name of an architecture (idempotent)."""
    return arch if arch.startswith(TT_PREFIX) else f"{TT_PREFIX}{arch}"


def launch_refusal(target: ModelTarget) -> str | None:
    """Why ``target`` cannot be served on this vLLM, in one sentence (None: it may be)."""
    why = UNSERVABLE_ARCHS.get(target.arch)
    if why is not None:
        return (
            f"{target.arch} cannot be served on TT: {why} "
            '(docs/TT_MODEL_CONTRACT.md, "Refused at launch").'
        )
    refused = UNSERVABLE_TARGETS.get(target.target)
    if refused is not None:
        selector, why = refused
        by_selector = target.source == "builtin" and bool(selector)
        hint = f"; choose another {selector.partition('=')[0]} value" if by_selector else ""
        return (
            f"{target.arch} from {selector if by_selector else target.source} ({target.target}) "
            f'cannot be served on TT: {why} (docs/TT_MODEL_CONTRACT.md, "Refused at launch"){hint}.'
        )
    return None


def _check_target(target: str, where: str) -> str:
    module_name, sep, class_name = target.strip().partition(":")
    if not sep or not module_name or not class_name or ":" in class_name:
        raise RegistryError(
            f"{where}: target {target!r} is not of the form 'module.path:ClassName'"
        )
    return f"{module_name.strip()}:{class_name.strip()}"


def parse_overrides(value: str) -> list[tuple[str, str]]:
    """Parse ``TT_MODEL_CLASS_OVERRIDES`` into (TT arch, target) pairs."""
    pairs: list[tuple[str, str]] = []
    for raw_entry in value.split(","):
        entry = raw_entry.strip()
        if not entry:
            continue
        arch, sep, target = entry.partition("=")
        arch = arch.strip()
        if not sep or not arch:
            raise RegistryError(
                f"TT_MODEL_CLASS_OVERRIDES entry {entry!r} is not of the form "
                "'Architecture=module.path:ClassName'"
            )
        pairs.append((tt_arch(arch), _check_target(target, f"TT_MODEL_CLASS_OVERRIDES[{arch}]")))
    return pairs


@dataclass(frozen=True)
class Bundle:
    arch: str  # TT-prefixed
    target: str
    path: Path
    lane_data_parallel: bool


def read_bundle(folder: Path) -> Bundle:
    meta_path = folder / "vllm_metadata.json"
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError as exc:
        raise RegistryError(f"EXTRA_MODELS_DIR bundle {folder} has no vllm_metadata.json") from exc
    except json.JSONDecodeError as exc:
        raise RegistryError(f"{meta_path} is not valid JSON: {exc}") from exc
    if not isinstance(meta, dict):
        raise RegistryError(f"{meta_path} must hold a JSON object, got {type(meta).__name__}")
    for key in ("arch", "main_class"):
        if not isinstance(meta.get(key), str) or not meta[key].strip():
            raise RegistryError(f"{meta_path}: field {key!r} is missing or not a non-empty string")
    lane_dp = meta.get("lane_data_parallel", False)
    if not isinstance(lane_dp, bool):
        raise RegistryError(f"{meta_path}: field 'lane_data_parallel' must be true or false")
    return Bundle(
        arch=tt_arch(meta["arch"].strip()),
        target=_check_target(meta["main_class"], str(meta_path)),
        path=folder,
        lane_data_parallel=lane_dp,
    )


def scan_bundles(models_dir: Path) -> list[Bundle]:
    if not models_dir.is_dir():
        raise RegistryError(f"EXTRA_MODELS_DIR={models_dir} is not a directory")
    return [read_bundle(sub) for sub in sorted(models_dir.iterdir()) if sub.is_dir()]


def builtin_targets(env: Mapping[str, str] | None = None) -> dict[str, tuple[str, bool]]:
    table = dict(_BUILTIN_FIXED)
    for var, versions in _SELECTORS.items():
        default = next(iter(versions))
        chosen = envs.REGISTRY[var].get(env) or default
        if chosen not in versions:
            raise RegistryError(
                f"{var}={chosen!r} is not a known version; accepted: {', '.join(versions)} "
                f"(unset: {default})"
            )
        table.update(versions[chosen])
    return table


def selector_table() -> dict[str, dict[str, dict[str, tuple[str, bool]]]]:
    """Selector variable -> version (the default first) -> {arch: (target, lane_dp)}."""
    return {
        var: {version: dict(archs) for version, archs in versions.items()}
        for var, versions in _SELECTORS.items()
    }


def selector_versions() -> dict[str, tuple[str, ...]]:
    """Each family selector variable and its accepted values, the default first."""
    return {var: tuple(versions) for var, versions in _SELECTORS.items()}


def all_builtin_targets() -> dict[str, tuple[str, ...]]:
    """Every built-in ``module:Class`` target under any selector value, and every
    ``KNOWN_TARGETS`` class -> the archs it serves.

    What a contract-parity check against a tt-metal checkout must cover.
    """
    served: dict[str, list[str]] = {t: list(archs) for t, archs in KNOWN_TARGETS.items()}
    tables = [_BUILTIN_FIXED, *(t for v in _SELECTORS.values() for t in v.values())]
    for table in tables:
        for arch, (target, _lane_dp) in table.items():
            served.setdefault(target, []).append(arch)
    return {target: tuple(sorted(set(archs))) for target, archs in sorted(served.items())}


# Served only through tt_transformers.vllm_registry: no tt-metal class of the plugin's table.
REGISTRY_ONLY_ARCHS: tuple[str, ...] = ("TTPhi3ForCausalLM",)


def _selector_chosen(arch: str, env: Mapping[str, str] | None) -> bool:
    """A family selector set to a non-default value names ``arch``'s class (it outranks
    tt-transformers' table: the operator asked for that generator)."""
    for var, versions in _SELECTORS.items():
        if any(arch in table for table in versions.values()):
            chosen = envs.REGISTRY[var].get(env)
            return bool(chosen) and chosen != next(iter(versions))
    return False


def _text_table() -> text_registry.TextRegistry | None:
    try:
        return text_registry.discover()
    except text_registry.MalformedTextRegistry as exc:
        raise RegistryError(
            f"{exc}. Refused rather than replaced by the plugin's own table (which names tt-metal "
            "modules this release may have moved): repair or remove tt-transformers, or set "
            "TT_VLLM_BUILTIN_MODELS=0 and register the classes with TT_MODEL_CLASS_OVERRIDES."
        ) from exc


class TTModelRegistry:
    """The resolved architecture -> class table of this process."""

    def __init__(self) -> None:
        self._targets: dict[str, ModelTarget] = {}
        # tt-transformers' table when it served (None: not importable, or built-ins disabled).
        self.text_table: text_registry.TextRegistry | None = None

    def _add(self, target: ModelTarget) -> bool:
        if target.arch in self._targets:
            return False  # a higher-precedence source already owns it
        self._targets[target.arch] = target
        return True

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TTModelRegistry:
        """The registry the environment describes (``env``: ``os.environ`` when None)."""
        registry = cls()
        for arch, target in parse_overrides(envs.TT_MODEL_CLASS_OVERRIDES.get(env)):
            registry._targets[arch] = ModelTarget(arch, target, "override")
        models_dir = envs.EXTRA_MODELS_DIR.get(env)
        if models_dir is not None:
            for bundle in scan_bundles(models_dir):
                # Appended, never prepended: an installed package of the same name wins.
                if str(bundle.path) not in sys.path:
                    sys.path.append(str(bundle.path))
                registry._add(
                    ModelTarget(bundle.arch, bundle.target, "bundle", bundle.lane_data_parallel)
                )
        try:
            use_builtin = envs.TT_VLLM_BUILTIN_MODELS.get(env)
        except envs.EnvError as exc:
            raise RegistryError(str(exc)) from exc
        if use_builtin:
            registry.text_table = _text_table()
            if registry.text_table is not None:
                for arch, target in registry.text_table.targets.items():
                    if not _selector_chosen(arch, env):
                        registry._add(ModelTarget(arch, target, "tt_transformers"))
            for arch, (target, lane_dp) in builtin_targets(env).items():
                registry._add(ModelTarget(arch, target, "builtin", lane_dp))
        return registry

    def add_test_models(self) -> None:
        for arch, (target, lane_dp) in _TEST_MODELS.items():
            self._add(ModelTarget(arch, target, "test", lane_dp))

    def overrides(self) -> list[ModelTarget]:
        return [t for t in self._targets.values() if t.source == "override"]

    def get(self, arch: str) -> ModelTarget | None:
        return self._targets.get(tt_arch(arch))

    def resolve(self, arch: str) -> ModelTarget:
        target = self.get(arch)
        if target is None:
            hint = ""
            if tt_arch(arch) in REGISTRY_ONLY_ARCHS:
                hint = (
                    f" It is served only by {text_registry.MODULE} (tenstorrent/tt-transformers), "
                    "which is not importable in this process."
                )
            if tt_arch(arch) in _TEST_MODELS:
                hint = (
                    ' It is a plugin test model: set {"tt": {"register_test_models": true}} '
                    "in --additional-config."
                )
            raise RegistryError(
                f"No TT model class is registered for architecture {tt_arch(arch)!r}.{hint} "
                "Register one with TT_MODEL_CLASS_OVERRIDES or an EXTRA_MODELS_DIR bundle, or "
                "check TT_VLLM_BUILTIN_MODELS."
            )
        return target

    def architectures(self) -> dict[str, ModelTarget]:
        return dict(self._targets)

    def text_models_served_by(self) -> str:
        """Which table serves the text architectures, for the launch log."""
        table = self.text_table
        if table is None:
            return (
                f"TT text models: the plugin's built-in table ({text_registry.MODULE} is not "
                "importable, or TT_VLLM_BUILTIN_MODELS=0)"
            )
        archs = sorted(a for a, t in self._targets.items() if t.source == "tt_transformers")
        return f"TT text models: {text_registry.MODULE} ({table.module_file}): {', '.join(archs)}"


_process_registry: TTModelRegistry | None = None


def get_registry(include_test_models: bool = False) -> TTModelRegistry:
    """This process's registry, built from the environment on first use."""
    global _process_registry
    if _process_registry is None:
        _process_registry = TTModelRegistry.from_env()
        for target in _process_registry.overrides():
            logger.info("Applied TT_MODEL_CLASS_OVERRIDES: %s -> %s", target.arch, target.target)
        logger.info("%s", _process_registry.text_models_served_by())
    if include_test_models:
        _process_registry.add_test_models()
    return _process_registry


def reset_registry() -> None:
    """Forget the process registry (tests change the environment between cases)."""
    global _process_registry
    _process_registry = None


def register_with_vllm(registry: TTModelRegistry) -> None:
    """Make the TT architectures and the test checkpoints' HF names known to vLLM's registry.

    Gemma 4 and DiffusionGemma are registered under their plain names too (``PLAIN_NAME_ARCHS``),
    pointing at the same TT class.
    """
    from vllm import ModelRegistry

    for arch, target in registry.architectures().items():
        ModelRegistry.register_model(arch, target.target)
    for arch in PLAIN_NAME_ARCHS:
        served = registry.get(arch)
        if served is not None:  # replaces vLLM's own class of that name
            ModelRegistry.register_model(arch, served.target)
    for arch, alias in TEST_CHECKPOINT_ALIASES.items():
        if arch not in ModelRegistry.get_supported_archs():
            ModelRegistry.register_model(arch, alias)
