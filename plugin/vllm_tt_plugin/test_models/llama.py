"""A Llama-style decoder in plain torch that matches ``transformers.LlamaForCausalLM`` in float32.

It knows nothing about paging, lanes or sampling: the caller supplies the attention step as a
callback, so the same layer code serves prefill, decode and warm-up over the paged KV cache
(``paged_kv.py``). Weights load from the checkpoint directory's safetensors files under their
Hugging Face parameter names.

Numerics follow HF's float32 path: RMSNorm in float32 with the config's ``rms_norm_eps``, default
RoPE with ``inv_freq = 1 / theta ** (arange(0, d, 2) / d)`` and rotate-half, GQA, SwiGLU MLP, no
biases, ``scale = head_dim ** -0.5``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

# Called once per layer: (layer index, q [T, H, D], k [T, Hkv, D], v [T, Hkv, D]) -> [T, H * D].
AttentionFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

COMPUTE_DTYPE = torch.float32


class ReferenceModelConfigError(ValueError):
    """The checkpoint's config or weights do not describe a model this decoder implements."""


def _rope_theta(hf_config: Any) -> float:
    """RoPE base from a transformers 5.x ``rope_parameters`` dict or the 4.x ``rope_theta``."""
    params = getattr(hf_config, "rope_parameters", None)
    if isinstance(params, dict) and params:
        # Per-layer-type dicts ({"full_attention": {...}, ...}) nest one level deeper.
        if "rope_theta" not in params and isinstance(params.get("full_attention"), dict):
            params = params["full_attention"]
        rope_type = params.get("rope_type", params.get("type", "default")) or "default"
        if rope_type != "default":
            raise ReferenceModelConfigError(
                f"rope_parameters.rope_type={rope_type!r} is not supported by the reference "
                "decoder (only 'default' RoPE)"
            )
        if params.get("partial_rotary_factor", 1.0) != 1.0:
            raise ReferenceModelConfigError(
                "rope_parameters.partial_rotary_factor must be 1.0 for the reference decoder"
            )
        if "rope_theta" in params:
            return float(params["rope_theta"])
    scaling = getattr(hf_config, "rope_scaling", None)
    if isinstance(scaling, dict) and scaling.get("rope_type", "default") != "default":
        raise ReferenceModelConfigError(
            f"rope_scaling={scaling!r} is not supported by the reference decoder"
        )
    theta = getattr(hf_config, "rope_theta", None)
    return float(theta) if theta is not None else 10000.0


@dataclass(frozen=True)
class LlamaDims:
    """The architecture numbers the decoder needs, parsed once from an HF config."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    tie_word_embeddings: bool

    @property
    def q_per_kv(self) -> int:
        return self.num_heads // self.num_kv_heads

    @classmethod
    def from_hf_config(cls, hf_config: Any) -> LlamaDims:
        def need(name: str) -> Any:
            value = getattr(hf_config, name, None)
            if value is None:
                raise ReferenceModelConfigError(f"hf_config has no {name!r}")
            return value

        num_heads = int(need("num_attention_heads"))
        num_kv_heads = int(getattr(hf_config, "num_key_value_heads", None) or num_heads)
        hidden = int(need("hidden_size"))
        head_dim = int(getattr(hf_config, "head_dim", None) or hidden // num_heads)
        if num_heads % num_kv_heads:
            raise ReferenceModelConfigError(
                f"num_attention_heads={num_heads} is not a multiple of "
                f"num_key_value_heads={num_kv_heads}"
            )
        if head_dim % 2:
            raise ReferenceModelConfigError(f"head_dim={head_dim} must be even for RoPE")
        act = getattr(hf_config, "hidden_act", "silu")
        if act != "silu":
            raise ReferenceModelConfigError(f"hidden_act={act!r} is not supported (only 'silu')")
        for flag in ("attention_bias", "mlp_bias"):
            if getattr(hf_config, flag, False):
                raise ReferenceModelConfigError(f"{flag}=True is not supported (no biases)")
        return cls(
            vocab_size=int(need("vocab_size")),
            hidden_size=hidden,
            intermediate_size=int(need("intermediate_size")),
            num_layers=int(need("num_hidden_layers")),
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            rms_norm_eps=float(getattr(hf_config, "rms_norm_eps", 1e-6)),
            rope_theta=_rope_theta(hf_config),
            tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
        )


@dataclass(frozen=True)
class LayerWeights:
    input_norm: torch.Tensor  # [hidden]
    q_proj: torch.Tensor  # [H * D, hidden]
    k_proj: torch.Tensor  # [Hkv * D, hidden]
    v_proj: torch.Tensor  # [Hkv * D, hidden]
    o_proj: torch.Tensor  # [hidden, H * D]
    post_norm: torch.Tensor  # [hidden]
    gate_proj: torch.Tensor  # [inter, hidden]
    up_proj: torch.Tensor  # [inter, hidden]
    down_proj: torch.Tensor  # [hidden, inter]


@dataclass(frozen=True)
class LlamaWeights:
    embed: torch.Tensor  # [V, hidden]
    layers: tuple[LayerWeights, ...]
    final_norm: torch.Tensor  # [hidden]
    lm_head: torch.Tensor  # [V, hidden] (the embedding itself when tied)


def checkpoint_dir(hf_config: Any) -> Path:
    """The checkpoint directory named by the config (vLLM sets ``_name_or_path``)."""
    raw = getattr(hf_config, "_name_or_path", None) or getattr(hf_config, "name_or_path", None)
    if not raw:
        raise ReferenceModelConfigError(
            "hf_config has no _name_or_path/name_or_path: cannot find the checkpoint weights"
        )
    path = Path(raw)
    if not path.is_dir():
        raise ReferenceModelConfigError(
            f"hf_config._name_or_path={raw!r} is not a local checkpoint directory"
        )
    return path


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (path / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        raise ReferenceModelConfigError(
            f"{path} has neither model.safetensors nor model.safetensors.index.json"
        )
    tensors: dict[str, torch.Tensor] = {}
    for name in files:
        tensors.update(load_file(str(path / name)))
    return tensors


def load_weights(
    path: Path,
    dims: LlamaDims,
    raw: dict[str, torch.Tensor],
    prefix: str = "model.",
    lm_head_name: str = "lm_head.weight",
) -> LlamaWeights:
    """The decoder's weights from the checkpoint's tensors (``raw``, read from ``path``);
    ``prefix``/``lm_head_name`` locate them inside a larger checkpoint (a vision-language model
    keeps its language model under another prefix)."""

    def take(name: str, shape: tuple[int, ...]) -> torch.Tensor:
        if name not in raw:
            raise ReferenceModelConfigError(f"{path}: weight {name!r} is missing")
        tensor = raw[name]
        if tuple(tensor.shape) != shape:
            raise ReferenceModelConfigError(
                f"{path}: weight {name!r} has shape {tuple(tensor.shape)}, expected {shape}"
            )
        return tensor.to(COMPUTE_DTYPE).contiguous()

    h, d, inter = dims.hidden_size, dims.head_dim, dims.intermediate_size
    layers = []
    for i in range(dims.num_layers):
        p = f"{prefix}layers.{i}."
        layers.append(
            LayerWeights(
                input_norm=take(p + "input_layernorm.weight", (h,)),
                q_proj=take(p + "self_attn.q_proj.weight", (dims.num_heads * d, h)),
                k_proj=take(p + "self_attn.k_proj.weight", (dims.num_kv_heads * d, h)),
                v_proj=take(p + "self_attn.v_proj.weight", (dims.num_kv_heads * d, h)),
                o_proj=take(p + "self_attn.o_proj.weight", (h, dims.num_heads * d)),
                post_norm=take(p + "post_attention_layernorm.weight", (h,)),
                gate_proj=take(p + "mlp.gate_proj.weight", (inter, h)),
                up_proj=take(p + "mlp.up_proj.weight", (inter, h)),
                down_proj=take(p + "mlp.down_proj.weight", (h, inter)),
            )
        )
    embed = take(f"{prefix}embed_tokens.weight", (dims.vocab_size, h))
    if dims.tie_word_embeddings:
        lm_head = embed
    else:
        lm_head = take(lm_head_name, (dims.vocab_size, h))
    return LlamaWeights(
        embed=embed,
        layers=tuple(layers),
        final_norm=take(f"{prefix}norm.weight", (h,)),
        lm_head=lm_head,
    )


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


class Rotary:
    """Default RoPE, computed per call from the positions (no max-length table to size)."""

    def __init__(self, head_dim: int, theta: float) -> None:
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim
        self.inv_freq = 1.0 / (theta**exponents)

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.to(torch.float32)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    @staticmethod
    def apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x: [T, heads, D]; cos/sin: [T, D]."""
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos[:, None, :] + rotated * sin[:, None, :]


class LlamaDecoder:
    """Token ids + positions -> final hidden states -> logits, attention supplied by the caller."""

    def __init__(self, dims: LlamaDims, weights: LlamaWeights) -> None:
        self.dims = dims
        self.weights = weights
        self.rotary = Rotary(dims.head_dim, dims.rope_theta)

    def hidden_states(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        attend: AttentionFn,
        embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """tokens, positions: int64 [T] -> normalised hidden states [T, hidden]. ``embeds``
        replaces the token embeddings (a vision model's image features at its placeholders)."""
        dims, w = self.dims, self.weights
        t = tokens.shape[0]
        cos, sin = self.rotary.cos_sin(positions)
        h = w.embed[tokens] if embeds is None else embeds
        for index, layer in enumerate(w.layers):
            x = rms_norm(h, layer.input_norm, dims.rms_norm_eps)
            q = (x @ layer.q_proj.T).view(t, dims.num_heads, dims.head_dim)
            k = (x @ layer.k_proj.T).view(t, dims.num_kv_heads, dims.head_dim)
            v = (x @ layer.v_proj.T).view(t, dims.num_kv_heads, dims.head_dim)
            q = Rotary.apply(q, cos, sin)
            k = Rotary.apply(k, cos, sin)
            h = h + attend(index, q, k, v) @ layer.o_proj.T
            x = rms_norm(h, layer.post_norm, dims.rms_norm_eps)
            gated = torch.nn.functional.silu(x @ layer.gate_proj.T) * (x @ layer.up_proj.T)
            h = h + gated @ layer.down_proj.T
        return rms_norm(h, w.final_norm, dims.rms_norm_eps)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden @ self.weights.lm_head.T
