"""Binding calls to the real tt-metal signatures, and reading them out of a checkout with ast."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from vllm_tt_plugin.contract import parity as contract_parity
from vllm_tt_plugin.contract.parity import CheckoutReader, FixtureSource, check, failures
from vllm_tt_plugin.contract.signatures import (
    ContractMismatch,
    FixtureError,
    bind_call,
    format_signature,
    load_profiles,
    parse_signature,
    profiles_from_mapping,
)
from vllm_tt_plugin.model_registry import all_builtin_targets

MLLAMA = "models.tt_transformers.tt.generator_vllm:MllamaForConditionalGeneration"
LLAMA = "models.tt_transformers.tt.generator_vllm:LlamaForCausalLM"
GENERATOR = "models.tt_transformers.tt.generator:Generator"


@pytest.fixture(scope="module")
def profiles() -> dict[str, Any]:
    return load_profiles()


def mllama_prefill(**changes: Any) -> dict[str, Any]:
    call = dict.fromkeys(
        ("tokens", "images", "page_table", "kv_cache", "prompt_lens", "cross_page_table")
    )
    call.update(changes)
    return {k: v for k, v in call.items() if v != "drop"}


PINNED = "0" * 40
PROVENANCE = {
    "repo": "tenstorrent/tt-metal",
    "path": "models/m.py",
    "commit": PINNED,
    "link": f"https://github.com/tenstorrent/tt-metal/blob/{PINNED}/models/m.py",
}


def _doc(**profiles: Any) -> dict[str, Any]:
    """A fixture document; methods without a ``provenance`` get a well-formed one."""
    for entry in profiles.values():
        for method in entry.get("methods", {}).values():
            if isinstance(method, dict):
                method.setdefault("provenance", dict(PROVENANCE))
    return {"profiles": profiles}


# The synthetic tree below mirrors this description of the tt_transformers Llama adapter and
# its Generator (the checker compares what it reads with a profile; the real fixture's profiles
# are pinned to the commits they cite, so these tests bring their own).
SYNTHETIC = {
    GENERATOR: {
        "role": "base",
        "facts": {"decode_contract": 1, "device_sampling": True},
        "methods": {
            "prefill_forward_text": {
                "signature": "(tokens, page_table=, kv_cache=, prompt_lens=, empty_slots=, "
                "enable_trace=, model_id_warmup=, sampling_params=, start_pos=, "
                "return_hidden_states=, warmup_prefill=, **kwargs)"
            },
            "decode_forward": {
                "signature": "(tokens, start_pos, page_table=, kv_cache=, enable_trace=, "
                "read_from_device=, sampling_params=, prompt_tokens=, output_tokens=, "
                "slot_remap=, defer_device_sampling=, *, reload_inputs=, reload_page_table=, "
                "reload_sampling_params=, reset_sampling_state=, **kwargs)"
            },
            "read_decode_output": {"signature": "(tt_out, async_read=)"},
            "process_decode_output_host": {"signature": "(tt_out, is_tokens=)"},
            "warmup_model_prefill": {
                "signature": "(kv_cache, enable_trace, can_sample_on_device, greedy_only=)"
            },
            "warmup_model_decode": {
                "signature": "(kv_cache, enable_trace, max_batch_size, num_blocks, "
                "can_sample_on_device, can_sample_device_grammar=, read_from_device=, "
                "greedy_only=, skip_trace_precompile=, sampling_trace_variants_prepared=)"
            },
            "get_max_tokens_all_users": {"signature": "(**kwargs)", "classmethod": True},
        },
    },
    LLAMA: {
        "family": "tt_transformers LlamaForCausalLM",
        "bases": [GENERATOR],
        "facts": {"decode_contract": 1, "device_sampling": True},
        "methods": {
            "initialize_vllm_model": {
                "signature": "(hf_config, mesh_device, max_batch_size, max_seq_len, n_layers=, "
                "tt_data_parallel=, optimizations=)",
                "classmethod": True,
            },
            "get_max_tokens_all_users": {
                "signature": "(model_name=, num_devices=, tt_data_parallel=, **kwargs)",
                "classmethod": True,
            },
            "prefill_forward": {
                "signature": "(*args, **kwargs)",
                "delegates_to": "prefill_forward_text",
            },
            "decode_forward": {"signature": "(*args, **kwargs)", "delegates_to": "decode_forward"},
            "allocate_kv_cache": {"signature": "(*args, **kwargs)"},
        },
    },
}


@pytest.fixture
def synthetic() -> dict[str, Any]:
    return profiles_from_mapping(_doc(**json.loads(json.dumps(SYNTHETIC))))


# --- binding --------------------------------------------------------------------------------------


def test_a_matching_call_binds_to_the_real_signature(profiles: dict[str, Any]) -> None:
    bound = bind_call(profiles[MLLAMA], "prefill_forward", (), mllama_prefill(tokens=[1, 2]))
    assert bound.arguments["tokens"] == [1, 2]


def test_a_renamed_argument_is_named_with_the_real_name(profiles: dict[str, Any]) -> None:
    call = mllama_prefill(images="drop", image=1)
    with pytest.raises(ContractMismatch) as info:
        bind_call(profiles[MLLAMA], "prefill_forward", (), call)
    err = info.value
    assert [(p.kind, p.argument) for p in err.problems] == [("renamed", "image")]
    assert "'image' is not accepted; the signature names 'images'" in str(err)
    # The message says which family and which method.
    assert str(err).startswith(
        f"tt_transformers Mllama (Llama 3.2 vision) ({MLLAMA}).prefill_forward("
    )
    assert isinstance(err, TypeError)  # what the real call would raise


def test_a_missing_required_argument_is_named(profiles: dict[str, Any]) -> None:
    with pytest.raises(ContractMismatch, match="missing required argument 'cross_page_table'"):
        bind_call(profiles[MLLAMA], "prefill_forward", (), mllama_prefill(cross_page_table="drop"))


def test_an_unexpected_argument_is_named(profiles: dict[str, Any]) -> None:
    with pytest.raises(ContractMismatch) as info:
        bind_call(profiles[MLLAMA], "prefill_forward", (), mllama_prefill(enable_trace=False))
    assert [(p.kind, p.argument) for p in info.value.problems] == [("unexpected", "enable_trace")]


def test_too_many_positionals_and_keyword_only_parameters() -> None:
    # The v1 reload commands are keyword-only in the decode forms that take them.
    decode = "(tokens, start_pos, page_table=, *, reload_inputs=, **kwargs)"
    generator = profiles_from_mapping(
        _doc(**{"m:G": {"methods": {"decode": {"signature": decode}}}})
    )
    bind_call(generator["m:G"], "decode", ([0], [0]), {"reload_inputs": True})
    with pytest.raises(ContractMismatch) as info:
        bind_call(generator["m:G"], "decode", (None,) * 12, {})
    assert info.value.problems[0].kind == "positional"
    with pytest.raises(ContractMismatch, match="given positionally and by name"):
        bind_call(generator["m:G"], "decode", ([0], [0]), {"tokens": [0]})


def test_a_method_the_fixture_does_not_list_is_an_error(profiles: dict[str, Any]) -> None:
    with pytest.raises(ContractMismatch, match="lists no 'prefill_forward_text'"):
        bind_call(profiles[MLLAMA], "prefill_forward_text")


def test_pass_through_methods_bind_to_what_they_delegate_to() -> None:
    built = profiles_from_mapping(
        _doc(
            **{
                "m:Base": {
                    "role": "base",
                    "methods": {"prefill_text": {"signature": "(tokens, kv_cache=)"}},
                },
                "m:Child": {
                    "bases": ["m:Base"],
                    "methods": {
                        "prefill_forward": {
                            "signature": "(*args, **kwargs)",
                            "delegates_to": "prefill_text",
                        }
                    },
                },
            }
        )
    )
    child = built["m:Child"]
    bind_call(child, "prefill_forward", (), {"tokens": 1, "kv_cache": 2})
    with pytest.raises(ContractMismatch, match=r"prefill_forward -> m:Base\.prefill_text.*'kv'"):
        bind_call(child, "prefill_forward", (), {"tokens": 1, "kv": 2})
    # Inherited methods are found through the bases, as attribute lookup finds them.
    owner, method = child.lookup("prefill_text") or (None, None)
    assert owner is built["m:Base"] and method is not None


# --- the fixture ----------------------------------------------------------------------------------


def test_every_family_profile_in_the_fixture_parses(profiles: dict[str, Any]) -> None:
    served = {t for t, p in profiles.items() if p.role == "served"}
    # Every class the registry can target has a profile (under any selector value).
    assert set(all_builtin_targets()) == served
    for profile in profiles.values():
        for method in profile.methods.values():
            # The parsed signature says the same as the text it came from.
            assert format_signature(method.signature) == method.text.replace(" ", "").replace(
                ",", ", "
            ), (profile.target, method.name)
            assert method.source, (profile.target, method.name)
            # Every method cites a file of tenstorrent/tt-metal at a commit (issue #33).
            prov = method.provenance
            assert prov is not None and prov.repo == "tenstorrent/tt-metal"
            assert (
                prov.link
                == f"https://github.com/tenstorrent/tt-metal/blob/{prov.commit}/{prov.path}"
            )
    llama = profiles[LLAMA]
    assert [b.target for b in llama.bases] == [GENERATOR]
    # The base Generator is not pinned at a commit in the fixture: the pass-through binds alone.
    chain = [(o.target, m.name) for o, m in llama.call_chain("prefill_forward")]
    assert chain == [(LLAMA, "prefill_forward")]


GEMMA4 = "models.demos.gemma4.tt.generator_vllm:Gemma4ForCausalLM"
QWEN25_VL = "models.demos.qwen25_vl.tt.generator_vllm:Qwen2_5_VLForConditionalGeneration"


def test_the_fixture_describes_the_registry_modules_at_their_cited_commits(
    profiles: dict[str, Any],
) -> None:
    gemma4 = profiles[GEMMA4]
    paths = {m.provenance.path for m in gemma4.methods.values() if m.provenance}
    assert paths == {"models/demos/gemma4/tt/generator_vllm.py"}
    assert [b.target for b in gemma4.bases] == [GENERATOR]
    assert not gemma4.facts.hybrid and gemma4.facts.decode_contract == 0
    # At the cited commit the Qwen2.5-VL adapter declares no decode_input_update_contract.
    qwen = profiles[QWEN25_VL]
    assert {m.provenance.commit for m in qwen.methods.values() if m.provenance} == {
        "b589652d6297a1e614164a2927bfa5cbac5faba8"
    }
    assert qwen.facts.decode_contract == 0
    assert "prefill_forward_text" not in profiles[GENERATOR].methods  # the fork's variant is gone


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (None, "needs a 'provenance' object"),
        ({"commit": None}, "field 'commit' is required"),
        ({"link": None}, "field 'link' is required"),
        ({"repo": "someone/tt-metal"}, "is not 'tenstorrent/tt-metal'"),
        ({"commit": "0015d62b"}, "not a full 40-hex commit"),
        ({"link": "https://github.com/someone/tt-metal/blob/x/models/m.py"}, "link"),
        ({"path": "../m.py"}, "is not a .py file"),
    ],
)
def test_a_method_without_upstream_provenance_fails_validation(
    change: dict[str, Any] | None, fragment: str
) -> None:
    method: dict[str, Any] = {"signature": "(a)"}
    if change is not None:
        provenance = {**PROVENANCE, **change}
        method["provenance"] = {k: v for k, v in provenance.items() if v is not None}
    doc = {"profiles": {"m:C": {"methods": {"f": method}}}}
    with pytest.raises(FixtureError, match=r"'m:C'\.f") as info:
        profiles_from_mapping(doc)
    assert fragment in str(info.value)


def test_the_plugin_calls_bind_to_every_profile_except_the_recorded_breaks(
    profiles: dict[str, Any],
) -> None:
    findings = check(FixtureSource(profiles), profiles, all_builtin_targets())
    assert failures(findings) == []
    known = {(f.target, f.method) for f in findings if f.status == "known"}
    recorded = {(t, m) for t, p in profiles.items() for m in p.known_breaks}
    # A recorded break that started binding would show up as "ok" and fail this.
    assert known == recorded
    assert any(f.status == "ok" and f.method == "decode_forward" for f in findings)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("tokens, page_table", "not a parenthesised parameter list"),
        ("(tokens, **kwargs, x)", "cannot parse"),
        ("(a=, b)", "cannot parse"),
    ],
)
def test_malformed_signature_text_is_named(text: str, fragment: str) -> None:
    with pytest.raises(FixtureError, match=fragment):
        parse_signature(text, "m:C.f")


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        (_doc(**{"m:C": {"bases": ["m:Gone"]}}), "no profile 'm:Gone' \\(a base of 'm:C'\\)"),
        (_doc(**{"m:C": {"methods": {"f": {"signature": "(a, b"}}}}), r"'m:C'\.f\.signature"),
        (_doc(**{"nocolon": {}}), "'module.path:ClassName'"),
        (
            _doc(**{"m:C": {"methods": {"f": {"signature": "()", "delegates_to": "g"}}}}),
            "delegates_to 'g', which no base profile lists",
        ),
        (_doc(**{"m:C": {"facts": {"decode_contract": "1"}}}), "'decode_contract' must be an int"),
        (_doc(**{"m:C": {"facts": {"hybird": True}}}), r"unknown fact\(s\) \['hybird'\]"),
        (_doc(**{"m:C": {"known_breaks": {"f": "x"}}}), "known_breaks names 'f'"),
        (_doc(**{"m:A": {"bases": ["m:B"]}, "m:B": {"bases": ["m:A"]}}), "inherits from itself"),
    ],
)
def test_malformed_fixture_errors_name_profile_and_field(
    doc: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(FixtureError, match=fragment):
        profiles_from_mapping(doc)


# --- reading a checkout with ast ------------------------------------------------------------------

WARMUP = """
class WarmupMixin:
    def warmup_model_prefill(self, kv_cache, enable_trace, can_sample_on_device, greedy_only=False):
        ...

    def warmup_model_decode(
        self, kv_cache, enable_trace, max_batch_size, num_blocks, can_sample_on_device,
        can_sample_device_grammar=False, read_from_device=True, greedy_only=False,
        skip_trace_precompile=False, sampling_trace_variants_prepared=None,
    ):
        ...
"""

GENERATOR_PY = """
from models.common.warmup import WarmupMixin


class Generator(WarmupMixin):
    decode_input_update_contract = 1

    def prefill_forward_text(
        self, tokens, page_table=None, kv_cache=None, prompt_lens=None, empty_slots=None,
        enable_trace=False, model_id_warmup=None, sampling_params=None, start_pos=None,
        return_hidden_states=False, warmup_prefill=True, **kwargs,
    ):
        ...

    def decode_forward(
        self, tokens, start_pos, page_table=None, kv_cache=None, enable_trace=True,
        read_from_device=True, sampling_params=None, prompt_tokens=None, output_tokens=None,
        slot_remap=None, defer_device_sampling=False, *, reload_inputs=True,
        reload_page_table=False, reload_sampling_params=False, reset_sampling_state=False,
        **kwargs,
    ):
        ...

    def read_decode_output(self, tt_out, async_read=False):
        ...

    def process_decode_output_host(self, tt_out, is_tokens=False):
        ...

    @classmethod
    def get_max_tokens_all_users(cls, **kwargs):
        return 131072
"""

VLLM_PY = """
{import_line}


class LlamaForCausalLM({base}):
    model_capabilities = {{"supports_async_decode": True, "supports_sample_on_device": True}}

    @classmethod
    def initialize_vllm_model(
        cls, hf_config, mesh_device, max_batch_size, max_seq_len, n_layers=None,
        tt_data_parallel=1, optimizations="performance",
    ):
        ...

    @classmethod
    def get_max_tokens_all_users(
        cls, model_name=None, num_devices=None, tt_data_parallel=1, **kwargs
    ):
        ...

    def prefill_forward(self, *args, **kwargs):
        return super().prefill_forward_text(*args, **kwargs)

    def decode_forward(self, *args, **kwargs):
        return super().decode_forward(*args, **kwargs)

    def allocate_kv_cache(self, *args, **kwargs):
        ...
"""

IMPORT_STYLES = {
    "from-import": ("from models.tt_transformers.tt.generator import Generator", "Generator"),
    "relative": ("from .generator import Generator", "Generator"),
    "module-alias": ("import models.tt_transformers.tt.generator as gen", "gen.Generator"),
}


def write_checkout(root: Path, style: str = "from-import", *edits: tuple[str, str]) -> Path:
    """A tt-metal-shaped tree holding the tt_transformers Llama adapter and its bases."""
    import_line, base = IMPORT_STYLES[style]
    files = {
        "models/common/warmup.py": WARMUP,
        "models/tt_transformers/tt/generator.py": GENERATOR_PY,
        "models/tt_transformers/tt/generator_vllm.py": VLLM_PY.format(
            import_line=import_line, base=base
        ),
    }
    for edit in edits:
        assert any(edit[0] in text for text in files.values()), edit
        files = {rel: text.replace(*edit) for rel, text in files.items()}
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def llama_findings(root: Path, profiles: dict[str, Any]) -> dict[str, Any]:
    findings = check(CheckoutReader(root), profiles, {LLAMA: ("TTLlamaForCausalLM",)})
    return {f.method: f for f in findings}


@pytest.mark.parametrize("style", sorted(IMPORT_STYLES))
def test_reader_finds_signatures_and_follows_inheritance(
    tmp_path: Path, style: str, synthetic: dict[str, Any]
) -> None:
    reader = CheckoutReader(write_checkout(tmp_path, style))
    own = reader.find_method(LLAMA, "initialize_vllm_model")
    assert own is not None and own.owner == LLAMA
    # The classmethod's cls is dropped, as for the bound call.
    assert format_signature(own.signature) == (
        "(hf_config, mesh_device, max_batch_size, max_seq_len, n_layers=, tt_data_parallel=, "
        "optimizations=)"
    )
    # Inherited twice over: Llama -> Generator -> WarmupMixin (another package of the checkout).
    warm = reader.find_method(LLAMA, "warmup_model_prefill")
    assert warm is not None and warm.owner == "models.common.warmup:WarmupMixin"
    assert warm.where.startswith("models/common/warmup.py:")
    # The subclass's own get_max_tokens_all_users shadows the base's.
    budget = reader.find_method(LLAMA, "get_max_tokens_all_users")
    assert budget is not None and budget.owner == LLAMA
    assert reader.bases(LLAMA) == [GENERATOR]
    # An unchanged checkout matches the fixture everywhere.
    statuses = {m: f.status for m, f in llama_findings(tmp_path, synthetic).items()}
    assert set(statuses.values()) == {"ok"}, statuses
    assert {"prefill_forward", "decode_forward", "warmup_model_decode"} <= set(statuses)


def test_a_changed_signature_that_breaks_a_plugin_call_is_flagged(
    tmp_path: Path, synthetic: dict[str, Any]
) -> None:
    # A required argument the plugin does not know (the older required
    # non_greedy_decoding_on_device is negotiated now: tests/unit/test_warmup_forms.py).
    write_checkout(
        tmp_path,
        "from-import",
        (
            "can_sample_on_device, greedy_only=False)",
            "can_sample_on_device, sampling_params_warmup)",
        ),
    )
    found = llama_findings(tmp_path, synthetic)["warmup_model_prefill"]
    # The platform refuses this form at launch (call_plan.negotiate_warmup): reported as such.
    assert found.status == "broken"
    assert "required but not passed: sampling_params_warmup" in found.detail
    assert "cannot be called as the TT model contract calls it" in found.detail
    assert "models/common/warmup.py:" in found.detail  # where the changed def is


def test_a_break_behind_a_pass_through_method_is_flagged(
    tmp_path: Path, synthetic: dict[str, Any]
) -> None:
    # Llama's prefill_forward(*args, **kwargs) forwards to Generator.prefill_forward_text; a
    # rename there (without **kwargs to absorb it) breaks the plugin's call.
    write_checkout(
        tmp_path,
        "from-import",
        (
            "start_pos=None,\n        return_hidden_states=False, warmup_prefill=True, **kwargs,",
            "start_positions=None,",
        ),
    )
    found = llama_findings(tmp_path, synthetic)["prefill_forward"]
    assert found.status == "broken"
    assert "'start_pos' is not accepted; the signature names 'start_positions'" in found.detail
    assert "unexpected argument 'empty_slots'" not in found.detail  # still accepted


def test_delegation_is_read_from_the_checkout(tmp_path: Path, synthetic: dict[str, Any]) -> None:
    # Older tt-metal: Llama's decode_forward forwards to a version-0 decode_forward_text without
    # **kwargs; the fixture says decode_forward. The checkout's super() call is what counts.
    legacy = (
        "\n    def decode_forward_text(\n        self, tokens, start_pos, page_table=None, "
        "kv_cache=None, enable_trace=True,\n        read_from_device=True, sampling_params=None, "
        "reset_batch=False,\n    ):\n        ...\n\n    def read_decode_output("
    )
    write_checkout(
        tmp_path,
        "from-import",
        ("super().decode_forward(*args", "super().decode_forward_text(*args"),
        ("\n    def read_decode_output(", legacy),
    )
    reader = CheckoutReader(tmp_path)
    outer = reader.find_method(LLAMA, "decode_forward")
    assert outer is not None and outer.delegates_to == "decode_forward_text"
    found = llama_findings(tmp_path, synthetic)["decode_forward"]
    assert found.status == "broken"
    assert f"({GENERATOR}).decode_forward_text(tokens, start_pos, page_table=" in found.detail
    for command in ("reload_inputs", "reload_sampling_params", "reset_sampling_state"):
        assert f"unexpected argument {command!r}" in found.detail
    assert "models/tt_transformers/tt/generator.py:" in found.detail


def test_a_compatible_change_is_drift_and_a_vanished_method_is_missing(
    tmp_path: Path, synthetic: dict[str, Any]
) -> None:
    write_checkout(
        tmp_path,
        "from-import",
        (
            "def read_decode_output(self, tt_out, async_read=False)",
            "def read_decode_output(self, tt_out, async_read=False, rows=None)",
        ),
    )
    found = llama_findings(tmp_path, synthetic)
    assert found["read_decode_output"].status == "drift"
    assert "checkout (tt_out, async_read=, rows=)" in found["read_decode_output"].detail
    assert failures(list(found.values())) == []

    write_checkout(tmp_path, "from-import", ("def decode_forward(", "def _decode_forward("))
    found = llama_findings(tmp_path, synthetic)
    assert found["decode_forward"].status == "missing"
    assert failures(list(found.values())) == [found["decode_forward"]]


def test_cli_exit_codes_and_the_skip_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert contract_parity.main([], environ={}) == 0
    assert "TT_METAL_HOME not set" in capsys.readouterr().out

    assert contract_parity.main([], environ={"TT_METAL_HOME": str(tmp_path / "none")}) == 2
    assert "not a tt-metal checkout" in capsys.readouterr().err

    write_checkout(tmp_path)
    env = {"TT_METAL_HOME": str(tmp_path)}
    # The Galaxy and T3000 Llama classes are not in this tree: reported, failing only on demand.
    assert contract_parity.main(["--arch", "LlamaForCausalLM"], environ=env) == 0
    out = capsys.readouterr().out
    assert "models.demos.llama3_70b_galaxy.tt.generator_vllm:LlamaForCausalLM" in out
    assert "no_class" in out
    assert contract_parity.main(["--arch", "TTLlamaForCausalLM", "--require-all"], environ=env) == 1
    capsys.readouterr()

    write_checkout(tmp_path, "from-import", ("is_tokens=False", "tokens_flag=False"))
    assert contract_parity.main(["--arch", "TTLlamaForCausalLM"], environ=env) == 1
    assert (
        "'is_tokens' is not accepted; the signature names 'tokens_flag'" in capsys.readouterr().out
    )

    assert contract_parity.main(["--arch", "TTNoSuchForCausalLM"], environ=env) == 2
    assert "not a built-in architecture" in capsys.readouterr().err
