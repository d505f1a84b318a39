"""Measure an accuracy task's reference score with Hugging Face transformers on a checkpoint, and
store it with the baseline.

    python tools/measure_accuracy_reference.py --model fixtures/models/tt-reference-llama \\
        [--task tt-patterns] [--device emulated-T3K] [--tolerance 0.02] [--no-update-expectations]

Greedy decoding, the same prompts, token budget, stop strings and scoring rules as the
conformance check (tt_conformance.accuracy), so the served model on the TT path should score
the same. Writes reports/baselines/<model>/<device>/accuracy_reference.json (score, counts,
checkpoint hash, library versions) and sets the task's entry (reference, tolerance,
num_samples, reference_source) in the expectations.json next to it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from importlib import metadata
from pathlib import Path

from tt_conformance.accuracy import (
    BUNDLED_TASKS,
    bundled_task_path,
    load_task,
    wilson_interval,
)
from tt_conformance.report import utc_now_iso
from tt_conformance.writers import atomic_write_text

REPO = Path(__file__).resolve().parents[1]


def checkpoint_digest(model_dir: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(model_dir.glob("*.safetensors")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def hf_completions(model_dir: Path, items: list) -> list[str]:
    import torch
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForImageTextToText,
        AutoTokenizer,
    )

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(model_dir)
    # A vision-language checkpoint (Qwen2-VL) is no causal LM to transformers; text-only
    # prompts through its image-text-to-text class are its language model's completions.
    config = AutoConfig.from_pretrained(model_dir)
    auto = AutoModelForCausalLM
    if hasattr(config, "vision_config"):
        auto = AutoModelForImageTextToText
    model = auto.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for item in items:
            ids = tok(item.prompt, return_tensors="pt").input_ids
            gen = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=item.max_tokens,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
            )
            text = tok.decode(gen[0, ids.shape[1] :], skip_special_tokens=True)
            # The server truncates at the first stop string (and does not return it).
            cut = min((text.find(s) for s in item.stop if s in text), default=-1)
            out.append(text if cut < 0 else text[:cut])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--task", default="tt-patterns", choices=sorted(BUNDLED_TASKS))
    # The emulated run's device (tools/run_emu_conformance.py): where its baseline lives.
    parser.add_argument("--device", default="emulated-T3K")
    parser.add_argument("--tolerance", type=float, default=0.02)
    parser.add_argument("--baselines", type=Path, default=REPO / "reports" / "baselines")
    parser.add_argument("--no-update-expectations", action="store_true")
    args = parser.parse_args(argv)
    items = load_task(bundled_task_path(args.task))
    texts = hf_completions(args.model, items)
    correct = sum(item.score(text) for item, text in zip(items, texts, strict=True))
    n = len(items)
    low, high = wilson_interval(correct, n)
    import transformers

    record = {
        "task": args.task,
        "score": round(correct / n, 6),
        "correct": correct,
        "num_samples": n,
        "ci_low": round(low, 6),
        "ci_high": round(high, 6),
        "measured_with": f"transformers {transformers.__version__}, torch "
        f"{metadata.version('torch')}, greedy, float32",
        "checkpoint": args.model.name,
        "checkpoint_sha256": checkpoint_digest(args.model),
        "measured_at": utc_now_iso(),
        "failures": [
            {"prompt": item.prompt, "expected": item.expected, "got": text}
            for item, text in zip(items, texts, strict=True)
            if not item.score(text)
        ],
    }
    out_dir = args.baselines / args.model.name / args.device
    out = out_dir / "accuracy_reference.json"
    atomic_write_text(out, json.dumps(record, indent=2) + "\n")
    print(f"{args.task} on {args.model.name}: {correct}/{n} = {correct / n:.3f} -> {out}")
    if not args.no_update_expectations:
        exp_path = out_dir / "expectations.json"
        data = json.loads(exp_path.read_text()) if exp_path.is_file() else {"schema_version": 2}
        data["schema_version"] = 2
        entries = [a for a in data.get("accuracy", []) if a.get("task") != args.task]
        entries.append(
            {
                "task": args.task,
                "reference": record["score"],
                "tolerance": args.tolerance,
                "num_samples": n,
                "reference_source": "transformers, greedy, same checkpoint: "
                "accuracy_reference.json (tools/measure_accuracy_reference.py)",
            }
        )
        data["accuracy"] = entries
        atomic_write_text(exp_path, json.dumps(data, indent=2) + "\n")
        print(f"expectations updated: {exp_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
