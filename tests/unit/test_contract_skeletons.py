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

from vllm_tt_plugin.contract_parity import CheckoutReader, check, failures, registry_targets
from vllm_tt_plugin.contract_signatures import load_profiles

SKELETONS = Path(__file__).resolve().parents[2] / "fixtures" / "tt_metal" / "skeletons"
EXPECTED: dict[str, dict[str, dict[str, dict[str, str]]]] = {
    tree.name: json.loads((tree / "expectations.json").read_text())["targets"]
    for tree in sorted(SKELETONS.iterdir())
    if (tree / "expectations.json").is_file()
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
    # Each tree has both outcomes: calls that bind, and (for the older forms) real breaks.
    assert any(m["status"] == "ok" for ms in seen.values() for m in ms.values())


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
        "read_decode_output",
    }
