"""The parity checker over signature skeletons of real tt-metal versions (issue #33, item 3).

``fixtures/tt_metal/skeletons/<tree>/`` holds hand-written interface skeletons (imports, class
lines, def headers, the class attributes the plugin reads, forwarding calls) of tenstorrent/tt-metal
files at the commits its README names. ``contract_parity.check`` runs over each tree through a
real ``CheckoutReader``, exactly as ``tox -e contract-parity`` runs over a checkout, and every
finding must match ``expectations.json``: the calls that bind, and each known break with its reason.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from vllm_tt_plugin.contract.parity import CheckoutReader, check, failures, registry_targets
from vllm_tt_plugin.contract.signatures import load_profiles

SKELETONS = Path(__file__).resolve().parents[2] / "fixtures" / "tt_metal" / "skeletons"
EXPECTED: dict[str, dict[str, dict[str, dict[str, str]]]] = {
    tree.name: json.loads((tree / "expectations.json").read_text())["targets"]
    for tree in sorted(SKELETONS.iterdir())
    if (tree / "expectations.json").is_file()
}
# Trees whose classes have no call that binds, and why.
NOTHING_BINDS = {
    # The executor-backed generator: its load takes no tt_data_parallel, and everything else it
    # hands to self.executor (composition, unresolved).
    "common_models-040a27c1",
}
HEADER = re.compile(r"tenstorrent/tt-metal \S+\.py @ [0-9a-f]{40}")


@pytest.fixture(scope="module")
def profiles() -> dict[str, Any]:
    return load_profiles()


def test_every_tree_has_expectations_and_every_skeleton_cites_its_commit() -> None:
    trees = sorted(p.name for p in SKELETONS.iterdir() if p.is_dir())
    assert trees == sorted(EXPECTED)
    for tree in trees:
        files = sorted((SKELETONS / tree).rglob("*.py"))
        assert files, tree
        for path in files:
            text = path.read_text()
            assert HEADER.search(text), f"{path}: no 'tenstorrent/tt-metal <path> @ <commit>' line"
            assert "https://github.com/tenstorrent/tt-metal/blob/" in text, path


@pytest.mark.parametrize("tree", sorted(EXPECTED))
def test_the_checker_reports_the_expected_outcome_per_target(
    tree: str, profiles: dict[str, Any]
) -> None:
    findings = check(CheckoutReader(SKELETONS / tree), profiles, registry_targets())
    seen: dict[str, dict[str, dict[str, str]]] = {}
    for f in findings:
        if f.status == "no_class":
            continue
        seen.setdefault(f.target, {})[f.method] = {"status": f.status, "detail": f.detail}
    expected = EXPECTED[tree]
    assert sorted(seen) == sorted(expected), tree
    for target, methods in expected.items():
        got = seen[target]
        assert sorted(got) == sorted(methods), (tree, target)
        for method, want in methods.items():
            assert got[method]["status"] == want["status"], (tree, target, method, got[method])
            if "reason" in want:
                assert want["reason"] in got[method]["detail"], (tree, target, method)
    # Every tree has calls that bind ("drift" where the fixture pins no signature to compare),
    # except a tree recorded as binding nothing.
    binds = any(m["status"] in ("ok", "drift") for ms in seen.values() for m in ms.values())
    assert binds != (tree in NOTHING_BINDS), tree


def test_the_older_tt_transformers_forms_break_where_the_plugin_needs_negotiation(
    profiles: dict[str, Any],
) -> None:
    """The d9d95fa3 Generator predates the contract-v2 prefill keywords and async read-back:
    the checker names the exact argument instead of reporting ok."""
    tree = SKELETONS / "tt_transformers-d9d95fa3"
    llama = "models.tt_transformers.tt.generator_vllm:LlamaForCausalLM"
    found = {
        f.method: f for f in check(CheckoutReader(tree), profiles, {llama: ("LlamaForCausalLM",)})
    }
    assert found["prefill_forward"].status == "broken"
    assert "Generator).prefill_forward_text(tokens, page_table=" in found["prefill_forward"].detail
    assert found["decode_forward"].status in ("ok", "drift")  # version 0, host sampling: binds
    assert {f.method for f in failures(list(found.values()))} == {
        "initialize_vllm_model",
        "prefill_forward",
    }
    # read_decode_output without process_decode_output_host: the adapter calls neither (it
    # expects host tensors), so the older read-back form is not a break.
    assert "read_decode_output" not in found


def _findings(tree: str, profiles: dict[str, Any]) -> dict[tuple[str, str], Any]:
    found = check(CheckoutReader(SKELETONS / tree), profiles, registry_targets())
    return {(f.target.rpartition(":")[2], f.method): f for f in found if f.status != "no_class"}


def test_issue_33_cases_on_the_committed_skeletons(profiles: dict[str, Any]) -> None:
    """The unsound cases issue #33 found, each on the tenstorrent/tt-metal files that show it."""
    # Galaxy: decode_forward passes on to decode_forward_text, which the 00b0fa3f Generator
    # (decode_forward only) does not define: an AttributeError at the first decode.
    galaxy = _findings("llama3_70b_galaxy-00b0fa3f", profiles)
    for cls in ("LlamaForCausalLM", "QwenForCausalLM"):
        f = galaxy[(cls, "decode_forward")]
        assert f.status == "missing" and "decode_forward_text" in f.detail, f
        # Its older 4-argument prefill warm-up is negotiated, not refused.
        assert galaxy[(cls, "warmup_model_prefill")].status in ("ok", "drift")
    # T3000: the keyword-only reload_* the adapter consumes are not reported further down;
    # the arguments that really fail are named.
    t3000_tree = _findings("t3000_llama2_70b-0b1e81be", profiles)
    t3000 = t3000_tree[("TtLlamaForCausalLM", "decode_forward")]
    assert t3000.status == "broken"
    downstream = t3000.detail.split("(fixture")[0]
    assert "'enable_trace'" in downstream and "'read_from_device'" in downstream
    assert "reload_" not in downstream and "slot_remap'" not in downstream
    # A warm-up form the plugin refuses at launch is reported with the platform's reason.
    deepseek = _findings("deepseek_v3-0ce6826b", profiles)
    f = deepseek[("DeepseekV3ForCausalLM", "warmup_model_prefill")]
    assert f.status == "broken" and "required but not passed: sampling_params" in f.detail
    # A base outside the tree is named; the checker does not claim the method is missing.
    gemma4 = _findings("gemma4-e749a1e5", profiles)
    f = gemma4[("Gemma4ForCausalLM", "decode_forward")]
    assert f.status == "unresolved" and "models.tt_transformers.tt.generator" in f.detail
    assert f in failures([f])


def test_issue_45_cases_on_the_newest_skeletons(profiles: dict[str, Any]) -> None:
    """The tt_transformers core at 21a4db48 and the 0b1e81be Generator (contract 1 on the base):
    the text families bind with the facts each base declares, Mistral 3 drops the images and the
    device-sampling parameters, Mllama fails for real (it is refused at launch)."""
    for tree, version in (("tt_transformers-21a4db48", 0), ("tt_transformers-0b1e81be", 1)):
        found = _findings(tree, profiles)
        llama = found[("LlamaForCausalLM", "decode_forward")]
        assert llama.status in ("ok", "drift"), llama
        assert ("reload_inputs=" in llama.detail) == (version == 1), llama.detail
        assert ("reset_batch=" in llama.detail) == (version == 0), llama.detail
        facts = found[("LlamaForCausalLM", "(class facts)")].detail
        assert ("decode_contract" in facts) == (version == 1), facts
        for cls in ("Gemma3ForConditionalGeneration", "GptOssForCausalLM"):
            f = found[(cls, "decode_forward")]
            assert f.status in ("ok", "drift") and "NotImplementedError" not in f.detail, f
        mistral3 = found[("Mistral3ForConditionalGeneration", "prefill_forward")]
        assert mistral3.status == "dropped" and mistral3 in failures([mistral3])
        assert "'pixel_values', 'image_sizes'" in mistral3.detail
        assert "'sampling_params'" in mistral3.detail
        assert found[("MllamaForConditionalGeneration", "decode_forward")].status == "broken"
        bad = {k for k, f in found.items() if f in failures([f])}
        assert {k[0] for k in bad} == {
            "Mistral3ForConditionalGeneration",
            "MllamaForConditionalGeneration",
        }, bad
