"""Per-batch choice between TT device sampling and vLLM's host sampler (pure).

Device sampling is a fast path. A batch takes it only when the launch plan allows it for this step
kind (launch/launch_plan.py decides that once, from the options and the model's capabilities) and no
row needs something only vLLM's sampler does; otherwise the whole batch falls back to the
host. The fallback is per batch and needs no configuration.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vllm.sampling_params import SamplingParams

from vllm_tt_plugin.launch.capabilities import ModelCapabilities
from vllm_tt_plugin.policy.device_logprobs import (
    NO_DEVICE_LOGPROBS,
    SAMPLING_EPS,
    DeviceLogprobSupport,
    has_penalties,
)
from vllm_tt_plugin.policy.step_kind import StepKind

if TYPE_CHECKING:
    from vllm_tt_plugin.launch.launch_plan import LaunchPlan


class Route(str, enum.Enum):
    DEVICE = "device"
    HOST = "host"


@dataclass(frozen=True)
class RouteDecision:
    route: Route
    reason: str  # why (for logs and tests)

    @property
    def on_device(self) -> bool:
        return self.route is Route.DEVICE


def host_only_feature(
    params: SamplingParams,
    caps: ModelCapabilities,
    logprobs: DeviceLogprobSupport = NO_DEVICE_LOGPROBS,
) -> str | None:
    """The first feature of ``params`` that only vLLM's host sampler provides, or None."""
    if params.min_p > 0.0:
        return "min_p"
    if params.logit_bias:
        return "logit_bias"
    if params.min_tokens > 0:
        return "min_tokens"
    if params.allowed_token_ids:
        return "allowed_token_ids"
    if params.bad_words_token_ids or params.bad_words:
        return "bad_words"
    if params.structured_outputs is not None:
        return "structured_outputs"
    if params.logprob_token_ids:
        return "logprob_token_ids"
    refusal = logprobs.refusal(params, caps.max_device_top_k)
    if refusal is not None:
        return refusal
    if (
        caps.max_device_top_k is not None
        and params.temperature >= SAMPLING_EPS
        and not 1 <= params.top_k <= caps.max_device_top_k
    ):
        return "top_k"
    if has_penalties(params) and not caps.supports_device_penalties:
        return "penalties"
    return None


def row_feature(plan: LaunchPlan, params: SamplingParams) -> str | None:
    """A row's host-only feature under this launch (``host_only_feature``): fixed for a
    request's life, so the runner derives it once, when the request arrives."""
    return host_only_feature(params, plan.capabilities, plan.logprobs)


def decide_route(
    plan: LaunchPlan,
    kind: StepKind,
    row_features: Iterable[str | None],
    has_custom_logitsprocs: bool = False,
    intermediate_chunk: bool = False,
) -> RouteDecision:
    """Pick the sampling route for one batch from its sampling rows' ``row_feature``s."""
    static = plan.step(kind).host_reason
    if static is not None:
        return RouteDecision(Route.HOST, static)
    if has_custom_logitsprocs:
        return RouteDecision(Route.HOST, "custom logits processors")
    if intermediate_chunk:
        # A chunk ending before its row's end emits no token: the batch samples on the host
        # and that row's output is dropped.
        return RouteDecision(Route.HOST, "intermediate prefill chunk")
    feature = next(filter(None, row_features), None)  # the first host-only one, at C speed
    if feature is not None:
        return RouteDecision(Route.HOST, feature)
    return RouteDecision(Route.DEVICE, "device sampling")


def choose_route(
    plan: LaunchPlan,
    kind: StepKind,
    sampling_rows: Iterable[SamplingParams],
    has_custom_logitsprocs: bool = False,
    intermediate_chunk: bool = False,
) -> RouteDecision:
    """``decide_route`` for rows given by their sampling parameters."""
    features = (row_feature(plan, params) for params in sampling_rows)
    return decide_route(plan, kind, features, has_custom_logitsprocs, intermediate_chunk)
