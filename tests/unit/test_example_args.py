"""examples/offline_inference_tt.py: the spec's vision flags become LLM() arguments and chat
messages (the engine run itself is an engine test; vision models need TT hardware)."""

from __future__ import annotations

import base64
import importlib.util
import io
from types import ModuleType

import pytest

from tests.conftest import REPO


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "offline_inference_tt", REPO / "examples" / "offline_inference_tt.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_text_only_run_has_no_multimodal_arguments(example: ModuleType) -> None:
    args = example.parse_args([])
    assert example.images_per_prompt(args) == 0
    assert example.multimodal_llm_kwargs(args) == {}
    with pytest.raises(SystemExit, match="--mm_processor_kwargs / --images need --multi_modal"):
        example.multimodal_llm_kwargs(example.parse_args(["--mm_processor_kwargs", "{}"]))


def test_gemma3_recipe_flags(example: ModuleType) -> None:
    argv = ["--multi_modal", "--multi_image", "--mm_processor_kwargs"]
    args = example.parse_args([*argv, '{"use_fast": true, "do_convert_rgb": true}'])
    assert example.images_per_prompt(args) == 2
    assert example.multimodal_llm_kwargs(args) == {
        "limit_mm_per_prompt": {"image": 2},
        "mm_processor_kwargs": {"use_fast": True, "do_convert_rgb": True},
    }
    bad = example.parse_args(["--multi_modal", "--mm_processor_kwargs", "[1]"])
    with pytest.raises(SystemExit, match="must be a JSON object"):
        example.multimodal_llm_kwargs(bad)


def test_messages_carry_images_then_text(example: ModuleType) -> None:
    from PIL import Image

    args = example.parse_args(["--multi_image"])
    urls = example.image_urls(args)
    assert len(urls) == 2 and len(set(urls)) == 2  # two distinct generated images
    raw = base64.b64decode(urls[0].split(",", 1)[1])
    assert Image.open(io.BytesIO(raw)).size == (224, 224)
    conversations = example.multimodal_messages(["a", "b"], urls, 2)
    assert [c[0]["content"][-1] for c in conversations] == [
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b"},
    ]
    assert [[p["image_url"]["url"] for p in c[0]["content"][:-1]] for c in conversations] == [
        urls,
        urls,
    ]
    given = example.parse_args(["--multi_modal", "--images", "https://example.com/cat.png"])
    assert example.image_urls(given) == ["https://example.com/cat.png"]
