"""Start vLLM's OpenAI-compatible server on TT (or, without TT hardware, the emulated mesh).

    MESH_DEVICE=T3K python examples/server_example_tt.py [--model NAME] [vllm serve args...]

Any argument not listed here is passed to `vllm serve` unchanged. Without TT hardware the
default model is the bundled reference model on a host-emulated mesh.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "plugin"))

from vllm_tt_plugin.utils.hostless import ensure_ttnn_importable, tt_hardware_available  # noqa: E402

HARDWARE_DEFAULT_MODEL = "meta-llama/Llama-3.1-70B-Instruct"
BUNDLED_MODEL = REPO / "fixtures" / "models" / "tt-reference-llama"


def build_argv(argv: list[str]) -> list[str]:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--model", default=None)
    p.add_argument("--additional-config", "--additional_config", dest="additional_config")
    known, rest = p.parse_known_args(argv)
    additional = json.loads(known.additional_config) if known.additional_config else {}
    hardware = tt_hardware_available()
    model = known.model or (HARDWARE_DEFAULT_MODEL if hardware else str(BUNDLED_MODEL))
    if not hardware:
        tt = dict(additional.get("tt") or {})
        tt.setdefault("emulated_mesh", True)
        tt.setdefault("register_test_models", True)
        additional["tt"] = tt
        os.environ.setdefault("MESH_DEVICE", "N300")
        mesh = os.environ["MESH_DEVICE"]
        print(f"No TT hardware found: serving {model} on a host-emulated {mesh} mesh")
    out = ["vllm", "serve", model]
    if additional:
        out += ["--additional-config", json.dumps(additional)]
    return out + rest


def main() -> None:
    ensure_ttnn_importable()
    os.environ.setdefault("VLLM_PLUGINS", "tt,tt_model_registry")
    sys.argv = build_argv(sys.argv[1:])
    from vllm.entrypoints.cli.main import main as vllm_main

    vllm_main()


if __name__ == "__main__":
    main()
