"""Every environment variable the harness reads or sets: name, type, default and one line of doc.

The same shape as the plugin's registry (``vllm_tt_plugin/launch/envs.py``), kept separate because
the harness never imports the plugin. Read a variable through ``VAR.get(env=None)``: ``env`` is
the mapping to read (``os.environ`` when None; tests pass their own); unset or blank -> the default.
The harness's variables are text whose meaning another module owns (a URL, a device name, a
token), so each rule stays where it is parsed. Variables set for a library the harness calls
are set with `scoped`, which restores the environment afterwards.

README.md's harness environment table is generated from ``REGISTRY`` by ``tools/gen_docs.py``;
a unit test fails when it drifts, and another when a harness module reads ``os.environ``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass

__all__ = [
    "HF_DATASETS_OFFLINE",
    "HF_HUB_OFFLINE",
    "MESH_DEVICE",
    "OPENAI_API_KEY",
    "REGISTRY",
    "TRANSFORMERS_OFFLINE",
    "TT_REFERENCE_CHECKPOINT",
    "TT_SERVER_URL",
    "VLLM_API_KEY",
    "EnvVar",
    "first_set",
    "scoped",
]


@dataclass(frozen=True)
class EnvVar:
    name: str
    type_name: str  # as the README shows it
    default: str | None
    doc: str

    def raw(self, env: Mapping[str, str] | None = None) -> str | None:
        value = (os.environ if env is None else env).get(self.name)
        if value is None or not value.strip():
            return None
        return value.strip()

    def get(self, env: Mapping[str, str] | None = None) -> str | None:
        raw = self.raw(env)
        return self.default if raw is None else raw

    @property
    def shown_default(self) -> str | None:
        """The default as the docs show it; None when the variable is simply unset."""
        return self.default or None


def first_set(*variables: EnvVar, env: Mapping[str, str] | None = None) -> str | None:
    """The value of the first variable that is set (not blank), else None."""
    for var in variables:
        value = var.raw(env)
        if value is not None:
            return value
    return None


@contextlib.contextmanager
def scoped(
    values: Mapping[EnvVar, str], env: MutableMapping[str, str] | None = None
) -> Iterator[None]:
    """Set ``values`` for the duration of the block (a library reads them), then restore."""
    target = os.environ if env is None else env
    saved = {var.name: target.get(var.name) for var in values}
    target.update({var.name: value for var, value in values.items()})
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                target.pop(name, None)
            else:
                target[name] = old


# --- the registry -------------------------------------------------------------------------------

TT_SERVER_URL = EnvVar(
    "TT_SERVER_URL",
    "URL",
    None,
    "The server under test when `--tt-server-url` is not given (`http://HOST:PORT`, `.../v1` "
    "accepted). Unset: the harness stays inert.",
)
MESH_DEVICE = EnvVar(
    "MESH_DEVICE",
    "str",
    "unknown",
    "The device the report is filed under when `--tt-device` (or `import-bench --device`) is "
    "not given; case-insensitive (N150, T3K, TG, P150X4, emulated, ...).",
)
OPENAI_API_KEY = EnvVar(
    "OPENAI_API_KEY",
    "str",
    None,
    "Bearer token for a server started with `--api-key` when `--tt-api-key` is not given; "
    "set for lm-eval during accuracy checks. Never written to a report.",
)
VLLM_API_KEY = EnvVar(
    "VLLM_API_KEY",
    "str",
    None,
    "The bearer token when neither `--tt-api-key` nor `OPENAI_API_KEY` is given.",
)
TT_REFERENCE_CHECKPOINT = EnvVar(
    "TT_REFERENCE_CHECKPOINT",
    "path",
    None,
    "The served checkpoint's directory when `--tt-reference-checkpoint` is not given: the "
    "forward_reference concern runs transformers on it (needs torch and transformers).",
)
HF_HUB_OFFLINE = EnvVar(
    "HF_HUB_OFFLINE",
    "bool",
    None,
    "Set to 1 by the harness while lm-eval scores an accuracy task (no downloads).",
)
HF_DATASETS_OFFLINE = EnvVar(
    "HF_DATASETS_OFFLINE",
    "bool",
    None,
    "Set to 1 by the harness while lm-eval scores an accuracy task (no downloads).",
)
TRANSFORMERS_OFFLINE = EnvVar(
    "TRANSFORMERS_OFFLINE",
    "bool",
    None,
    "Set to 1 by the harness while lm-eval scores an accuracy task (no downloads).",
)

REGISTRY: dict[str, EnvVar] = {
    var.name: var
    for var in (
        TT_SERVER_URL,
        MESH_DEVICE,
        OPENAI_API_KEY,
        VLLM_API_KEY,
        TT_REFERENCE_CHECKPOINT,
        HF_HUB_OFFLINE,
        HF_DATASETS_OFFLINE,
        TRANSFORMERS_OFFLINE,
    )
}
