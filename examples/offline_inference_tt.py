"""Offline generation with vLLM on TT (or, without TT hardware, on the host-emulated mesh).

    MESH_DEVICE=T3K python examples/offline_inference_tt.py [--model NAME] [--measure_perf]

Without TT hardware the default model is the bundled reference model and the plugin runs on
the host-emulated mesh (TT options emulated_mesh and register_test_models are added).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "plugin"))  # run from a source checkout without an install

from vllm_tt_plugin.utils.hostless import ensure_ttnn_importable, tt_hardware_available  # noqa: E402

HARDWARE_DEFAULT_MODEL = "meta-llama/Llama-3.1-70B-Instruct"
BUNDLED_MODEL = REPO / "fixtures" / "models" / "tt-reference-llama"
EMULATED_TT_OPTIONS = {"emulated_mesh": True, "register_test_models": True}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default=None, help="HF model id or checkpoint directory")
    p.add_argument("--prompts_json", type=Path, default=REPO / "examples" / "prompts.json")
    p.add_argument("--max_seqs_in_batch", type=int, default=32, help="--max-num-seqs (per lane)")
    p.add_argument("--num_repeat_prompts", type=int, default=1)
    p.add_argument("--max_model_len", type=int, default=None)
    p.add_argument("--max_tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--measure_perf", action="store_true", help="time one batch of prompts")
    p.add_argument(
        "--additional-config",
        dest="additional_config",
        default=None,
        help='JSON, e.g. \'{"tt": {"sample_on_device_mode": "all"}}\'',
    )
    p.add_argument("--data_parallel_size", type=int, default=1)
    p.add_argument("--async-scheduling", dest="async_scheduling", action="store_true")
    p.add_argument(
        "--multi_modal", action="store_true", help="one image per prompt (vision models on TT)"
    )
    p.add_argument("--multi_image", action="store_true", help="two images per prompt")
    p.add_argument(
        "--images",
        nargs="+",
        default=None,
        help="image files or URLs for --multi_modal (default: generated test images)",
    )
    p.add_argument("--mm_processor_kwargs", default=None, help="JSON, e.g. '{\"use_fast\": true}'")
    return p.parse_args(argv)


def images_per_prompt(args: argparse.Namespace) -> int:
    return 2 if args.multi_image else (1 if args.multi_modal else 0)


def multimodal_llm_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """LLM() arguments for the vision flags (empty for text-only runs)."""
    n = images_per_prompt(args)
    if n == 0:
        if args.mm_processor_kwargs or args.images:
            raise SystemExit("--mm_processor_kwargs / --images need --multi_modal or --multi_image")
        return {}
    kwargs: dict[str, Any] = {"limit_mm_per_prompt": {"image": n}}
    if args.mm_processor_kwargs:
        processor = json.loads(args.mm_processor_kwargs)
        if not isinstance(processor, dict):
            raise SystemExit("--mm_processor_kwargs must be a JSON object")
        kwargs["mm_processor_kwargs"] = processor
    return kwargs


def image_urls(args: argparse.Namespace) -> list[str]:
    """Image URLs for chat messages: the given files (as data URLs) or URLs, else generated
    gradient images (no network needed)."""
    import base64
    import io

    from PIL import Image

    def data_url(image: Image.Image) -> str:
        buf = io.BytesIO()
        image.convert("RGB").save(buf, format="PNG")
        return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()

    if args.images:
        return [
            src if src.startswith(("http://", "https://", "data:")) else data_url(Image.open(src))
            for src in args.images
        ]
    size = 224
    return [
        data_url(Image.new("RGB", (size, size), (40 + 90 * i, 120, 200 - 60 * i)))
        for i in range(images_per_prompt(args))
    ]


def multimodal_messages(
    prompts: list[str], urls: list[str], per_prompt: int
) -> list[list[dict[str, Any]]]:
    """One chat conversation per prompt with ``per_prompt`` images (cycling through ``urls``)."""
    conversations = []
    for i, prompt in enumerate(prompts):
        images = [urls[(i * per_prompt + k) % len(urls)] for k in range(per_prompt)]
        content = [{"type": "image_url", "image_url": {"url": u}} for u in images]
        content.append({"type": "text", "text": prompt})
        conversations.append([{"role": "user", "content": content}])
    return conversations


def resolve_launch(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The model and additional_config: hardware defaults, or the emulated bundled model."""
    additional: dict[str, Any] = (
        json.loads(args.additional_config) if args.additional_config else {}
    )
    if not isinstance(additional, dict):
        raise SystemExit("--additional-config must be a JSON object")
    hardware = tt_hardware_available()
    model = args.model or (HARDWARE_DEFAULT_MODEL if hardware else str(BUNDLED_MODEL))
    if not hardware:
        tt = dict(additional.get("tt") or {})
        for key, value in EMULATED_TT_OPTIONS.items():
            tt.setdefault(key, value)
        additional["tt"] = tt
        os.environ.setdefault("MESH_DEVICE", "N300")
        mesh = os.environ["MESH_DEVICE"]
        print(f"No TT hardware found: serving {model} on a host-emulated {mesh} mesh")
    return model, additional


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    mm_kwargs = multimodal_llm_kwargs(args)
    if mm_kwargs and args.model is None and not tt_hardware_available():
        raise SystemExit(
            "--multi_modal / --multi_image / --mm_processor_kwargs need a TT vision model "
            "(--model) on TT hardware; the bundled reference model is text-only"
        )
    ensure_ttnn_importable()
    os.environ.setdefault("VLLM_PLUGINS", "tt,tt_model_registry")
    model, additional = resolve_launch(args)

    from vllm import LLM, SamplingParams

    prompts: list[str] = json.loads(args.prompts_json.read_text()) * args.num_repeat_prompts
    llm = LLM(
        model=model,
        max_num_seqs=args.max_seqs_in_batch,
        max_model_len=args.max_model_len,
        data_parallel_size=args.data_parallel_size,
        async_scheduling=args.async_scheduling or None,
        additional_config=additional,
        **mm_kwargs,
    )
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature)
    per_prompt = images_per_prompt(args)
    if per_prompt:
        conversations = multimodal_messages(prompts, image_urls(args), per_prompt)

        def run(batch: list[int]) -> list[Any]:
            return llm.chat([conversations[i] for i in batch], params, use_tqdm=False)
    else:

        def run(batch: list[int]) -> list[Any]:
            return llm.generate([prompts[i] for i in batch], params, use_tqdm=False)

    if args.measure_perf:
        run(list(range(min(len(prompts), 2))))  # warm
    start = time.perf_counter()
    outputs = run(list(range(len(prompts))))
    elapsed = time.perf_counter() - start
    for out in outputs:
        print(f"{out.prompt!r} -> {out.outputs[0].text!r}")
    if args.measure_perf:
        generated = sum(len(o.outputs[0].token_ids) for o in outputs)
        print(
            f"perf: {len(outputs)} prompts, {generated} tokens in {elapsed:.2f} s = "
            f"{generated / elapsed:.1f} tok/s ({elapsed / max(args.max_tokens, 1) * 1000:.1f} "
            "ms per decode step incl. prefill)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
