#!/usr/bin/env python3
"""Build `fixtures/models/tt-reference-llava` from the bundled Llama checkpoint.

A Hugging Face `LlavaForConditionalGeneration` (model_type "llava"): a small CLIP vision tower
(32x32 images, 8x8 patches, so 16 image tokens per image) and a two-layer GELU projector, both
randomly initialised from a fixed seed, in front of the bundled reference Llama as language
model. The tokenizer is the Llama's plus one special token, `<image>`, whose embedding row is the
mean of the others and whose lm_head row is the element-wise minimum (so it is never the greedy
choice). The processor is transformers' LlavaProcessor (CLIP image processor + that tokenizer
+ the Llama's chat template).

The plugin serves it as `ReferenceLlavaForConditionalGeneration`
(plugin/vllm_tt_plugin/test_models/reference_vision.py) with vLLM's own LLaVA processor; the
engine tests compare its greedy tokens with transformers' LLaVA on the same images. The vision
weights are untrained, so images steer the output but the answers are not meaningful.

Deterministic: the same input checkpoint gives the same weights.

    python tools/make_llava_checkpoint.py [--src fixtures/models/tt-reference-llama]
        [--out fixtures/models/tt-reference-llava]

Needs torch, safetensors, transformers (5.x) and Pillow; no network.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SRC = REPO / "fixtures" / "models" / "tt-reference-llama"
DEFAULT_OUT = REPO / "fixtures" / "models" / "tt-reference-llava"
ARCHITECTURE = "ReferenceLlavaForConditionalGeneration"
IMAGE_TOKEN = "<image>"
IMAGE_SIZE, PATCH_SIZE = 32, 8
SEED = 0

README = """# tt-reference-llava

A tiny LLaVA-style vision-language checkpoint for the plugin's tests, built by
`tools/make_llava_checkpoint.py` from `tt-reference-llama` (the language model, unchanged apart
from one added token, `<image>`) and a randomly initialised CLIP vision tower and projector
(seed {seed}). Images are {size}x{size} after preprocessing and become {tokens} tokens each.

It loads in Hugging Face transformers as `LlavaForConditionalGeneration`; the plugin serves it as
`TTReferenceLlavaForConditionalGeneration` with `register_test_models: true`. The vision weights
are untrained: images change the output, but the answers mean nothing.
"""


def build(src: Path, out: Path) -> None:
    import torch
    from safetensors.torch import load_file
    from tokenizers import AddedToken
    from transformers import (
        AutoTokenizer,
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    tokenizer = AutoTokenizer.from_pretrained(src)
    tokenizer.add_tokens([AddedToken(IMAGE_TOKEN, special=True, normalized=False)])
    image_token_id = tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
    text_fields = json.loads((src / "config.json").read_text())
    for key in ("architectures", "transformers_version", "dtype"):
        text_fields.pop(key, None)
    text_fields["vocab_size"] = len(tokenizer)
    tokens_per_image = (IMAGE_SIZE // PATCH_SIZE) ** 2
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=IMAGE_SIZE,
            patch_size=PATCH_SIZE,
            projection_dim=64,
        ),
        text_config=LlamaConfig(**text_fields),
        image_token_index=image_token_id,
        projector_hidden_act="gelu",
        vision_feature_select_strategy="default",
        vision_feature_layer=-2,
        image_seq_length=tokens_per_image,
    )
    config.architectures = [ARCHITECTURE]
    torch.manual_seed(SEED)
    model = LlavaForConditionalGeneration(config).eval()
    llama = load_file(str(src / "model.safetensors"))
    with torch.no_grad():
        for name, param in model.model.language_model.named_parameters():
            weight = llama["model." + name]
            if name == "embed_tokens.weight":
                param[: weight.shape[0]] = weight
                param[weight.shape[0] :] = weight.mean(0)
            else:
                param.copy_(weight)
        head = llama["lm_head.weight"]
        model.lm_head.weight[: head.shape[0]] = head
        model.lm_head.weight[head.shape[0] :] = head.min(0).values
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model.save_pretrained(out)
    # save_pretrained writes the class name; the plugin serves the checkpoint under its own.
    saved = json.loads((out / "config.json").read_text())
    saved["architectures"] = [ARCHITECTURE]
    (out / "config.json").write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # CLIP's class token, dropped by the "default" strategy
        chat_template=tokenizer.chat_template,
        image_token=IMAGE_TOKEN,
    )
    processor.save_pretrained(out)
    (out / "README.md").write_text(
        README.format(seed=SEED, size=IMAGE_SIZE, tokens=tokens_per_image)
    )


def check(out: Path) -> None:
    """The checkpoint loads in transformers and an image changes the greedy continuation."""
    import torch
    from PIL import Image
    from transformers import AutoProcessor, LlavaForConditionalGeneration

    processor = AutoProcessor.from_pretrained(out)
    model = LlavaForConditionalGeneration.from_pretrained(out, dtype=torch.float32).eval()
    chat = [{"role": "user", "content": f"{IMAGE_TOKEN}\nWhat is this?"}]
    text = processor.tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    outputs = []
    for color in ((200, 30, 90), (10, 230, 20)):
        picture = Image.new("RGB", (48, 40), color)
        inputs = processor(images=[picture], text=[text], return_tensors="pt")
        ids = model.generate(**inputs, max_new_tokens=16, do_sample=False)
        outputs.append(ids[0, inputs["input_ids"].shape[1] :].tolist())
    print(f"greedy continuations for two images: {outputs}")
    if outputs[0] == outputs[1]:
        raise SystemExit("the image does not change the output: the vision path is inert")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=DEFAULT_SRC)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    build(args.src, args.out)
    check(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
