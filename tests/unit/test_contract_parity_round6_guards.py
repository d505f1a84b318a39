"""Red-team round 6 (rt45f), guards and return forms: a driven method that binds but raises (or
returns None) for the values the plugin sends. Each tree below once read as "binds"; each must
now be ``broken`` naming the guard, its control must still bind, and the skeleton of each tree
must read as the tree (``parity_raises``, ``plugin_values``, ``skeleton_guards``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_contract_parity_holes import (
    BASE,
    COMMIT,
    SIG,
    TARGET,
    _decode,
    _findings,
    _tree,
)
from vllm_tt_plugin.contract import parity_diff
from vllm_tt_plugin.contract.parity import CheckoutReader, check
from vllm_tt_plugin.contract.parity_rules import FAILING, Finding
from vllm_tt_plugin.contract.signatures import profiles_from_mapping
from vllm_tt_plugin.contract.skeleton import write_skeletons

# The decode hands the version's reload commands on (one it takes and never uses is dropped).
SENDS = (
    "        return self.generator.decode(tokens, sampling_params, reload_inputs, "
    "reload_page_table, reload_sampling_params, reset_sampling_state)"
)
NO_REMAP = SIG.replace(" slot_remap=None,", "")
ASYNC_OFF = ('"supports_async_decode": True', '"supports_async_decode": False')
# A checkout helper in the form of tt-metal's models/common/decode_contract.py @
# 40f4746e27acded3f2eaf7307bd1c3a2a86f7add (require_full_input_reload rejects every command
# but a full host-input reload; reject_legacy_reload_signal rejects a `reset_batch` key).
HELPERS = '''
def only_full_reload(name, *, reload_inputs, reload_page_table, reload_sampling_params,
                     reset_sampling_state):
    """Refuses what a host-authoritative decode cannot run."""
    refused = []
    if not reload_inputs:
        refused.append("reload_inputs")
    if reload_page_table:
        refused.append("reload_page_table")
    if reload_sampling_params:
        refused.append("reload_sampling_params")
    if reset_sampling_state:
        refused.append("reset_sampling_state")
    if refused:
        raise ValueError(f"{name}: cannot run {refused}")


def no_reset_batch(name, kwargs):
    if "reset_batch" in kwargs:
        raise ValueError(f"{name}: reset_batch is the legacy signal")
'''
IMPORT = "from models.common.decode_guards import no_reset_batch, only_full_reload\n"
FULL_ONLY = (
    "        only_full_reload('Demo', reload_inputs=reload_inputs,\n"
    "                         reload_page_table=reload_page_table,\n"
    "                         reload_sampling_params=reload_sampling_params,\n"
    "                         reset_sampling_state=reset_sampling_state)\n" + SENDS
)
VERSION_0 = ("decode_input_update_contract = 1", "decode_input_update_contract = 0")
# A version-1 base whose decode refuses reset_batch; the leaf drops to version 0 and passes
# everything through (T1 / T1b: tt_transformers' Generator @ 0b1e81be and a leaf with `= 0`).
BASE_GENERATOR = """
class _Generator:
    decode_input_update_contract = 1

    def decode_forward(self, tokens, start_pos, page_table=None, kv_cache=None,
                       enable_trace=True, read_from_device=True, sampling_params=None,
                       *, reload_inputs=True, reload_page_table=False,
                       reload_sampling_params=False, reset_sampling_state=False, **kwargs):
        no_reset_batch(type(self).__name__, kwargs)
        return self.generator.decode(tokens, sampling_params)
"""
PASS_THROUGH = "        return super().decode_forward(*args, **kwargs)"


def _version0_leaf() -> str:
    leaf = _decode(PASS_THROUGH, sig="self, *args, **kwargs").replace(*VERSION_0)
    return (
        IMPORT + BASE_GENERATOR + leaf.replace("DemoForCausalLM:", "DemoForCausalLM(_Generator):")
    )


def _with(adapter: str, *edit: str) -> str:
    return adapter.replace(*edit) if edit else adapter


# (name, adapter, words the decode_forward finding must name)
REFUSED = [
    ("x3_assert_slot_remap", _decode(
        "        assert slot_remap is None, 'no slot remapping yet'\n" + SENDS
    ), "`assert slot_remap is None` fails"),
    ("x3_assert_kwargs_slot_remap", _decode(
        "        assert kwargs.get('slot_remap') is None\n" + SENDS, sig=NO_REMAP
    ), "`assert kwargs.get('slot_remap') is None` fails"),
    ("x4_assert_no_page_table_reload", _decode(
        "        assert not reload_page_table, 'page-table-only reload is not implemented'\n"
        + SENDS
    ), "reload_page_table=True"),
    ("x4_if_raise", _decode(
        "        if reload_page_table and not reload_inputs:\n"
        "            raise NotImplementedError('page-table-only reload')\n" + SENDS
    ), "raises NotImplementedError"),
    ("own_helper_assert", _decode(
        "        self._check(reload_page_table)\n" + SENDS,
        "    def _check(self, page_table_only):\n        assert not page_table_only\n",
    ), "DemoForCausalLM._check `assert not page_table_only` fails"),
    ("t2_full_reload_only_helper", IMPORT + _decode(FULL_ONLY),
     "only_full_reload raises ValueError"),
    ("t1_version0_own_decode", IMPORT + _decode(
        "        no_reset_batch('Demo', kwargs)\n" + SENDS
    ).replace(*VERSION_0), "reset_batch=True"),
    ("t1_version0_leaf_over_version1_base", _version0_leaf(),
     "DemoForCausalLM.decode_forward -> _Generator.decode_forward -> no_reset_batch raises"),
    ("f13_returns_on_traced_branch_only", _decode(
        "        if enable_trace:\n"
        "            return self.generator.decode(tokens, sampling_params)\n"
        "        out = self.generator.decode(tokens, sampling_params)\n"
        "        self._last = out"
    ), "enable_trace=False"),
]  # fmt: skip
CONTROLS = [
    # Without resident inputs (no async decode) the planner never sends a page-table-only
    # reload (ReloadPlanner: INPUTS_ONLY instead).
    ("x4_async_off", _with(REFUSED[2][1], *ASYNC_OFF)),
    ("guard_on_the_instance", _decode("        assert self.generator is not None\n" + SENDS)),
    ("version1_refuses_reset_batch", IMPORT + _decode(
        "        no_reset_batch('Demo', kwargs)\n" + SENDS
    )),
    ("version1_base_not_dropped", _version0_leaf().replace(*reversed(VERSION_0))),
    ("both_branches_return", _decode(
        "        if enable_trace:\n"
        "            return self.generator.decode(tokens, sampling_params)\n"
        "        return self.generator.decode(tokens, None)"
    )),
    # Host steps carry no sampling_params and never reset sampling state.
    ("guard_that_never_fires", _decode(
        "        if sampling_params is None and reset_sampling_state:\n"
        "            raise ValueError('a reset without parameters')\n" + SENDS
    )),
    # X2: the temperatures are not a value the checker knows: not evaluated (documented limit).
    ("x2_greedy_only_not_evaluated", _decode(
        "        if sampling_params is not None and any(\n"
        "                t > 0 for t in sampling_params.temperature):\n"
        "            raise NotImplementedError('greedy only on device')\n" + SENDS
    )),
]  # fmt: skip


def _tree_with_helpers(root: Path, adapter: str) -> Path:
    _tree(root, adapter)
    helpers = root / "models/common/decode_guards.py"
    helpers.parent.mkdir(parents=True, exist_ok=True)
    helpers.write_text(HELPERS)
    return root


@pytest.mark.parametrize(("name", "adapter", "words"), REFUSED, ids=[c[0] for c in REFUSED])
def test_a_guard_that_fires_for_a_plugin_call_is_broken(
    tmp_path: Path, name: str, adapter: str, words: str
) -> None:
    status, detail = _findings(_tree_with_helpers(tmp_path, adapter))["decode_forward"]
    assert status == "broken", detail
    assert words in detail, detail


@pytest.mark.parametrize(("name", "adapter"), CONTROLS, ids=[c[0] for c in CONTROLS])
def test_a_guard_the_plugin_never_trips_still_binds(
    tmp_path: Path, name: str, adapter: str
) -> None:
    status, detail = _findings(_tree_with_helpers(tmp_path, adapter))["decode_forward"]
    assert status in ("ok", "drift"), detail  # drift: the demo fixture pins no methods


@pytest.mark.parametrize(
    ("name", "adapter"),
    [(n, a) for n, a, _ in REFUSED] + CONTROLS,
    ids=[c[0] for c in REFUSED] + [c[0] for c in CONTROLS],
)
def test_the_skeleton_reads_as_the_tree(tmp_path: Path, name: str, adapter: str) -> None:
    src = _tree_with_helpers(tmp_path / "tree", adapter)
    write_skeletons(src, tmp_path / "skel", {TARGET: ("TTDemoForCausalLM",)}, COMMIT)
    tree = {m: s for m, (s, _) in _findings(src).items()}
    skel = {m: s for m, (s, _) in _findings(tmp_path / "skel").items()}
    assert skel == tree


def test_reload_commands_come_from_the_plugins_planner() -> None:
    """The values a decode carries are the planner's: a steady async device decode sends
    reload_inputs=False (resident inputs), a host step reloads its sampling parameters."""
    from vllm_tt_plugin.contract.call_plan import PlannedCall
    from vllm_tt_plugin.contract.plugin_values import scenarios

    keys = ("tokens", "sampling_params", "reload_inputs", "reload_page_table",
            "reload_sampling_params", "reset_sampling_state", "enable_trace")  # fmt: skip
    device = PlannedCall("decode_forward", "device", (), keys)
    seen = {(s.values["reload_inputs"], s.values["reload_page_table"])
            for s in scenarios(device, async_decode=True)}  # fmt: skip
    assert (False, False) in seen and (False, True) in seen
    unresident = {s.values["reload_inputs"] for s in scenarios(device, async_decode=False)}
    assert unresident == {True}
    host = PlannedCall(
        "decode_forward", "host", (), tuple(k for k in keys if k != "sampling_params")
    )
    # A host-sampled step sends the device no sampling parameters (reload_contract.py).
    assert {s.values["reload_sampling_params"] for s in scenarios(host, async_decode=True)} == {
        False
    }


# --- R1: an mRoPE prefill must return (out, rope_deltas) -----------------------------------------
PREFILL_SENDS = "        return self.generator.prefill(tokens, sampling_params, empty_slots)\n"


def _prefill(body: str, extra: str = "") -> str:
    assert PREFILL_SENDS in BASE, "the shared base's prefill changed: edit PREFILL_SENDS"
    return BASE.replace(PREFILL_SENDS, body + "\n" + extra)


def _mrope_findings(root: Path) -> dict[str, tuple[str, str]]:
    profile = {"family": "demo", "facts": {"mrope": True}}
    profiles = profiles_from_mapping({"profiles": {TARGET: profile}})
    found = check(CheckoutReader(root), profiles, {TARGET: ("TTDemoForCausalLM",)})
    return {f.method: (f.status, f.detail) for f in found}


NO_PAIR = [
    ("r1_bare_logits", _prefill(
        "        return self.generator.prefill(tokens, sampling_params, empty_slots)"
    )),
    ("r1_own_helper_bare", _prefill(
        "        return self._text(tokens, sampling_params, empty_slots)",
        "    def _text(self, tokens, sampling_params, empty_slots):\n"
        "        logits = self.generator.prefill(tokens, sampling_params, empty_slots)\n"
        "        return logits\n",
    )),
]  # fmt: skip
# R1's form: the adapter returns what its generator's prefill_forward_text returns (logits).
TEXT_BASE = (
    "\nclass _TextGenerator:\n"
    "    def prefill_forward_text(self, tokens, sampling_params, empty_slots):\n"
    "        logits = self.generator.prefill(tokens, sampling_params, empty_slots)\n"
    "        return logits\n\n"
)
R1_FORM = TEXT_BASE + _prefill(
    "        return self.prefill_forward_text(tokens, sampling_params, empty_slots)"
).replace("class DemoForCausalLM:", "class DemoForCausalLM(_TextGenerator):")
NO_PAIR.append(("r1_generator_text_returns_logits", R1_FORM))
# Documented limit: where the tree elides that body (rt45f's R1 tree: the hand-written Qwen3-VL
# generator skeleton), it says nothing of the form: not judged.
ELIDED_BASE = R1_FORM.replace(
    "        logits = self.generator.prefill(tokens, sampling_params, empty_slots)\n"
    "        return logits\n",
    "        ...\n",
)
PAIR = [
    ("r1_limit_elided_generator_body", ELIDED_BASE),
    ("r1_pair", _prefill(
        "        logits, deltas = self.generator.prefill(tokens, sampling_params, empty_slots)\n"
        "        return logits, deltas"
    )),
    ("r1_pair_in_a_local", _prefill(
        "        out = (self.generator.prefill(tokens, sampling_params, empty_slots),"
        " self.deltas)\n"
        "        return out"
    )),
    ("r1_pair_from_own_helper", _prefill(
        "        return self._text(tokens, sampling_params, empty_slots)",
        "    def _text(self, tokens, sampling_params, empty_slots):\n"
        "        return self.generator.prefill(tokens, sampling_params, empty_slots),"
        " self.deltas\n",
    )),
]  # fmt: skip


@pytest.mark.parametrize(("name", "adapter"), NO_PAIR, ids=[c[0] for c in NO_PAIR])
def test_an_mrope_prefill_without_a_visible_pair_is_unresolved(
    tmp_path: Path, name: str, adapter: str
) -> None:
    status, detail = _mrope_findings(_tree(tmp_path, adapter))["prefill_forward"]
    assert status == "unresolved", detail
    assert "`(out, rope_deltas)` pair" in detail, detail


@pytest.mark.parametrize(("name", "adapter"), PAIR, ids=[c[0] for c in PAIR])
def test_an_mrope_prefill_returning_the_pair_binds(tmp_path: Path, name: str, adapter: str) -> None:
    status, detail = _mrope_findings(_tree(tmp_path, adapter))["prefill_forward"]
    assert status in ("ok", "drift"), detail
    # A model without mRoPE is not asked for the pair.
    assert _findings(_tree(tmp_path / "plain", NO_PAIR[0][1]))["prefill_forward"][0] in (
        "ok",
        "drift",
    )


@pytest.mark.parametrize(("name", "adapter"), NO_PAIR + PAIR, ids=[c[0] for c in NO_PAIR + PAIR])
def test_the_mrope_skeleton_reads_as_the_tree(tmp_path: Path, name: str, adapter: str) -> None:
    """A pair binds in both; a skeleton writes returns as None / (None, None), so it does not
    judge a missing pair (documented limit: the tree's `unresolved` reads as binding there)."""
    src = _tree(tmp_path / "tree", adapter)
    write_skeletons(src, tmp_path / "skel", {TARGET: ("TTDemoForCausalLM",)}, COMMIT)
    tree = {m: s for m, (s, _) in _mrope_findings(src).items()}
    skel = {m: s for m, (s, _) in _mrope_findings(tmp_path / "skel").items()}
    if tree["prefill_forward"] == "unresolved":
        assert skel.pop("prefill_forward") in ("ok", "drift")
        tree.pop("prefill_forward")
    assert skel == tree


# --- D1: --diff compares the failures, not only the status ---------------------------------------
STRICT = (
    "self, tokens, start_pos, page_table, kv_cache, *, enable_trace=False, read_from_device=True,"
    " sampling_params=None, reload_inputs=True, reload_page_table=True,"
    " reload_sampling_params=True, reset_sampling_state=False"
)


def test_diff_reports_a_bump_that_breaks_more_calls_of_a_failing_method(tmp_path: Path) -> None:
    """rt45f D1: OLD fails only remap decodes (no slot_remap), NEW every device decode too
    (no sampling_params either): both `broken`, but NEW fails calls OLD did not."""
    old = _findings_list(_tree(tmp_path / "old", _decode(SENDS, sig=STRICT)))
    no_sp = STRICT.replace(" sampling_params=None,", "")
    new = _findings_list(_tree(tmp_path / "new", _decode(SENDS, sig=no_sp)))
    targets = {TARGET: ("TTDemoForCausalLM",)}
    before, after = (parity_diff.verdicts(f, targets, FAILING) for f in (old, new))
    assert before[TARGET].statuses["decode_forward"] == after[TARGET].statuses["decode_forward"]
    assert parity_diff.regressed(before, after) == [TARGET]
    report = "\n".join(parity_diff.diff_report(before, after))
    assert "newly failing: device call: unexpected argument 'sampling_params'" in report, report
    # The same failures moved to other lines (a re-signed method) are no change.
    moved = _findings_list(_tree(tmp_path / "moved", "\n\n" + _decode(SENDS, sig=STRICT)))
    again = parity_diff.verdicts(moved, targets, FAILING)
    assert parity_diff.regressed(before, again) == []
    assert parity_diff.diff_report(before, again)[-1].startswith("diff: 0 target(s)")


def _findings_list(root: Path) -> list[Finding]:
    profiles = profiles_from_mapping({"profiles": {TARGET: {"family": "demo", "facts": {}}}})
    return check(CheckoutReader(root), profiles, {TARGET: ("TTDemoForCausalLM",)})


# --- W3: a property setter of already_warmed_up_prefill that may ignore the plugin's False -------
GETTER = (
    "    @property\n    def already_warmed_up_prefill(self):\n        return self._warmed\n\n"
    "    @already_warmed_up_prefill.setter\n    def already_warmed_up_prefill(self, value):\n"
)
SETTERS = [
    ("w3_sticky_once_warmed", "        self._warmed = self._warmed or value\n", "unresolved"),
    ("w3_only_true_kept", "        if value:\n            self._warmed = value\n", "unresolved"),
    ("w3_plain_setter", "        self._warmed = value\n", "ok"),
]


@pytest.mark.parametrize(("name", "setter", "status"), SETTERS, ids=[c[0] for c in SETTERS])
def test_a_warm_up_flag_setter_must_keep_false(
    tmp_path: Path, name: str, setter: str, status: str
) -> None:
    adapter = BASE.replace(
        "    def allocate_kv_cache(", GETTER + setter + "\n    def allocate_kv_cache("
    )
    found = _findings(_tree(tmp_path / "tree", adapter))
    if status == "ok":
        assert "already_warmed_up_prefill" not in found, found
    else:
        assert found["already_warmed_up_prefill"][0] == status, found
        assert "may be ignored" in found["already_warmed_up_prefill"][1]
    write_skeletons(tmp_path / "tree", tmp_path / "skel", {TARGET: ("TTDemoForCausalLM",)}, COMMIT)
    skel = _findings(tmp_path / "skel")
    assert {m: s for m, (s, _) in skel.items()} == {m: s for m, (s, _) in found.items()}


def test_the_recorded_reload_commands_are_the_planners() -> None:
    """plugin_values.COMMANDS (the checker runs without vLLM) is what ReloadPlanner.plan gives
    over every device view a decode can follow, per route, remap and resident inputs."""
    from vllm_tt_plugin.contract.plugin_values import COMMANDS
    from vllm_tt_plugin.contract.reload_contract import DecodeStep, DeviceView, ReloadPlanner
    from vllm_tt_plugin.policy.sampling_route import Route
    from vllm_tt_plugin.policy.step_kind import StepKind

    derived: dict[tuple[bool, bool, bool], set[tuple[bool, ...]]] = {}
    for device, remap, resident in COMMANDS:
        for kind in (None, StepKind.PREFILL, StepKind.DECODE):
            for last in (Route.HOST, Route.DEVICE):
                for layout, blocks in ((("a",), (1,)), (("b",), (1,)), (("a",), (2,))):
                    view = DeviceView(kind, ("a",), last, (1,))
                    planner = ReloadPlanner(view=view, resident_inputs=resident)
                    route = Route.DEVICE if device else Route.HOST
                    command = planner.plan(
                        DecodeStep(layout, route, blocks, (0,) if remap else None)
                    )
                    derived.setdefault((device, remap, resident), set()).add(
                        tuple(command.v1_kwargs().values())
                    )
    assert {k: set(v) for k, v in COMMANDS.items()} == derived
