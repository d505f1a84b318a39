"""The skeleton tool (``tox -e tt-metal-skeleton``) and ``contract.parity --diff`` (#45, item 3).

A skeleton of a checkout must read, to the checker, exactly as the checkout does (same status for
every target and method), carry no code besides the interface, record where it came from, and be
a fixed point (the skeleton of a skeleton is itself). The diff names the targets whose verdict
changes between two trees and why.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_contract_parity_checker import ADAPTER, GENERATOR, TARGET, edit, profiles, tree
from vllm_tt_plugin.contract import parity
from vllm_tt_plugin.contract.parity import CheckoutReader, check, registry_targets
from vllm_tt_plugin.contract.signatures import FixtureError, load_profiles
from vllm_tt_plugin.contract.skeleton import main, skeleton_text, write_skeletons

SKELETONS = Path(__file__).resolve().parents[2] / "fixtures" / "tt_metal" / "skeletons"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPO_ROOT = Path(__file__).resolve().parents[2]

# A checkout whose bodies hold what the checker reads amid ordinary code (loops, branches, logs,
# nested helpers), so the skeleton has to extract it.
BUSY_ADAPTER = "import loguru\n" + ADAPTER.replace(
    "    def prefill_forward(self, *args, **kwargs):\n"
    "        return super().prefill_forward_text(*args, **kwargs)",
    textwrap.indent(
        textwrap.dedent(
            """
            def prefill_forward(self, *args, **kwargs):
                loguru.logger.info(f"keys {kwargs.keys()}")
                images = kwargs.get("images")
                for i in range(3):
                    if images and i > 1:
                        self._prepare(images[i])

                def helper(self, x):
                    return self.not_a_method_of_the_adapter(x)

                tokens = kwargs["tokens"]
                table = kwargs.get("page_table")
                return super().prefill_forward_text(tokens=tokens, page_table=table)

            def _prepare(self, image):
                total = 0
                for k in range(10):
                    total += k
                return self.vision(image) if hasattr(self, "vision") else total
            """
        ),
        "    ",
    ),
)


def _statuses(
    root: Path, targets: dict[str, tuple[str, ...]], prof: Any
) -> list[tuple[str, str, str]]:
    return [(f.target, f.method, f.status) for f in check(CheckoutReader(root), prof, targets)]


def test_a_skeleton_reads_as_its_checkout_and_keeps_no_body(tmp_path: Path) -> None:
    src = tree(tmp_path / "checkout", adapter=BUSY_ADAPTER)
    targets = {TARGET: ("TTDemoForCausalLM",)}
    mm = profiles(multimodal_kwargs=["pixel_values"])
    written = write_skeletons(src, tmp_path / "out", targets, COMMIT)
    assert {w.path for w in written} == {
        "models/demo/tt/generator.py",
        "models/demo/tt/generator_vllm.py",
    }
    before = _statuses(src, targets, mm)
    after = _statuses(tmp_path / "out", targets, mm)
    assert before == after
    assert ("prefill_forward", "dropped") in {(m, s) for _, m, s in after}  # not hidden
    text = (tmp_path / "out/models/demo/tt/generator_vllm.py").read_text()
    assert f"tenstorrent/tt-metal models/demo/tt/generator_vllm.py @ {COMMIT}" in text
    assert f"https://github.com/tenstorrent/tt-metal/blob/{COMMIT}/models/demo/tt/" in text
    # The interface is there; the code is not.
    assert "for i in range" not in text and "total += k" not in text and "logger" not in text
    assert "not_a_method_of_the_adapter" not in text  # a nested function's own self
    assert 'kwargs.get("images")' in text.replace("'", '"')
    assert "hasattr(self, 'vision')" in text or 'hasattr(self, "vision")' in text
    # Called with named values: the names are kept, so the call still binds on the skeleton.
    assert "super().prefill_forward_text(tokens=..., page_table=...)" in text
    assert "return super().decode_forward(*args, **kwargs)" in text  # a pass-through: bound
    ast.parse(text)


def test_the_skeleton_of_a_skeleton_tree_is_itself_and_keeps_each_files_commit(
    tmp_path: Path,
) -> None:
    targets = registry_targets()
    prof = load_profiles()
    for name in (
        "tt_transformers-21a4db48",
        "llama3_70b_galaxy-00b0fa3f",
        "t3000_llama2_70b-0b1e81be",
    ):
        committed = SKELETONS / name
        first = write_skeletons(committed, tmp_path / name / "1", targets)
        assert _statuses(committed, targets, prof) == _statuses(
            tmp_path / name / "1", targets, prof
        )
        # Each file records the path and commit its committed skeleton records.
        for w in first:
            header = (committed / w.path).read_text().splitlines()[:12]
            assert any(f"{w.source} @ {w.commit}" in line for line in header), (name, w)
        second = write_skeletons(tmp_path / name / "1", tmp_path / name / "2", targets)
        assert first == second
        for w in first:
            assert (tmp_path / name / "1" / w.path).read_text() == (
                tmp_path / name / "2" / w.path
            ).read_text()


def test_the_cli_writes_a_tree_and_refuses_bad_input(tmp_path: Path, capsys: Any) -> None:
    src = tree(tmp_path / "checkout")
    # Not a registry target's module: nothing to write, but a clean run.
    assert main([str(src), str(tmp_path / "out"), "--commit", COMMIT]) == 0
    assert "0 module(s)" in capsys.readouterr().out
    assert main([str(tmp_path / "nowhere"), str(tmp_path / "out")]) == 2
    assert "not a tt-metal checkout" in capsys.readouterr().err
    assert main([str(src), str(tmp_path / "out"), "--commit", "abc"]) == 2
    assert "not a 40-hex commit" in capsys.readouterr().err
    # A checkout that is no git repository and no --commit: refused, naming the way out.
    real = SKELETONS / "tt_transformers-21a4db48"
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-rL", str(real), str(copy)], check=True)
    for f in copy.rglob("*.py"):  # strip the recorded commit
        f.write_text("\n".join(ln for ln in f.read_text().splitlines() if "@" not in ln) + "\n")
    assert main([str(copy), str(tmp_path / "out2")]) == 2
    assert "pass --commit SHA" in capsys.readouterr().err
    # A git checkout records its HEAD; a tree inside another repository does not take that one.
    subprocess.run(["git", "init", "-q", str(copy)], check=True)
    subprocess.run(["git", "-C", str(copy), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(copy), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
        check=True,
    )
    head = subprocess.run(["git", "-C", str(copy), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    assert main([str(copy), str(tmp_path / "out3")]) == 0
    text = (tmp_path / "out3/models/tt_transformers/tt/generator.py").read_text()
    assert f"models/tt_transformers/tt/generator.py @ {head}" in text
    assert main([str(copy / "models" / ".."), str(tmp_path / "out4")]) == 0  # same top
    nested = copy / "sub"
    nested.mkdir()
    subprocess.run(["cp", "-r", str(copy / "models"), str(nested)], check=True)
    assert main([str(nested), str(tmp_path / "out5")]) == 2  # inside copy's repository


def test_skeleton_text_refuses_nothing_it_can_parse() -> None:
    text = skeleton_text(
        "import os\nX = os.environ.get('A', '0') == '1'\nY = object()\n"
        "class C(B):\n    model_capabilities = {'supports_sample_on_device': X}\n"
        "    def f(self, a: int = 3, *, b=[1]):\n        return 1\n",
        "models/x.py",
        COMMIT,
    )
    assert "X = os.environ.get('A', '0') == '1'" in text  # evaluated by the checker: kept
    # anything else: a call the checker cannot evaluate (`...` would read as a value: a fact
    # built from Y would be read as known where the tree's is unknown)
    assert "Y = unevaluated()" in text
    assert "model_capabilities = {'supports_sample_on_device': X}" in text
    # It returns a value: kept as such (the checker refuses a result method that returns none).
    assert "def f(self, a=..., *, b=...):\n        return None  # a value (elided)" in text


def test_diff_names_the_targets_that_change_verdict_and_why(tmp_path: Path, capsys: Any) -> None:
    old, new = SKELETONS / "tt_transformers-0015d62b", SKELETONS / "tt_transformers-21a4db48"
    assert parity.main(["--diff", str(old), str(new)]) == 0  # nothing newly fails
    out = capsys.readouterr().out
    llama = "models.tt_transformers.tt.generator_vllm:LlamaForCausalLM  [TTLlamaForCausalLM]"
    assert f"{llama}: fails -> binds" in out
    assert "  prefill_forward: broken -> drift" in out
    # Mistral 3 fails in both, for another reason: named too.
    mistral3 = "Mistral3ForConditionalGeneration  [TTMistral3ForConditionalGeneration]"
    assert f"{mistral3}: fails -> fails (other failures)" in out
    assert "  prefill_forward: broken -> dropped: " in out
    # Mllama's decode fails in both trees for the same call, for other missing arguments
    # (rt45f D1: failures are compared, not only the status); reported, not a regression.
    assert "  decode_forward: broken, fails another way: plain call: missing required" in out
    assert "diff: 7 target(s) change verdict or failure" in out
    # The same tree twice: nothing changes.
    assert parity.main(["--diff", str(new), str(new)]) == 0
    unchanged = len(registry_targets())
    assert f"diff: 0 target(s) change verdict or failure, {unchanged} unchanged" in (
        capsys.readouterr().out
    )
    # A tool-written tree diffs against its source as equal.
    write_skeletons(new, tmp_path / "re", registry_targets())
    assert parity.main(["--diff", str(new), str(tmp_path / "re")]) == 0
    assert "diff: 0 target(s)" in capsys.readouterr().out
    assert parity.main(["--diff", str(new), str(tmp_path / "nowhere")]) == 2
    assert "not a tt-metal tree" in capsys.readouterr().err


def test_table_lists_a_trees_verdicts(capsys: Any) -> None:
    assert parity.main(["--table", str(SKELETONS / "tt_transformers-21a4db48")]) == 0
    out = capsys.readouterr().out
    assert "| `LlamaForCausalLM` | binds | - |" in out
    assert "| `Mistral3ForConditionalGeneration` | fails | `prefill_forward` (dropped) |" in out
    assert "T3000" not in out and "TtLlamaForCausalLM" not in out  # not in this tree


@pytest.mark.parametrize("env", ["tt-metal-skeleton"])
def test_the_tox_env_runs_the_tool(env: str) -> None:
    ini = (REPO_ROOT / "tox.ini").read_text()
    section = ini.split(f"[testenv:{env}]", 1)[1].split("\n[", 1)[0]
    assert "commands = python -m vllm_tt_plugin.contract.skeleton {posargs}" in section
    run = subprocess.run(
        [sys.executable, "-m", "vllm_tt_plugin.contract.skeleton", "--help"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO_ROOT / "plugin"), "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0 and "TT_METAL_HOME" in run.stdout
    assert edit(GENERATOR, ("class Generator:", "class Generator:"))  # the helpers stay importable


def test_a_skeleton_keeps_explicit_base_forwards_helpers_and_decorators(tmp_path: Path) -> None:
    # Issue #45 red team: `Base.m(self, *args, **kwargs)` was written as `kwargs.copy()`, the
    # helper's body and a method's own decorator were dropped: the skeleton bound where the
    # checkout does not.
    adapter = (
        ADAPTER.replace(
            "        return super().decode_forward(*args, **kwargs)",
            "        return Generator.decode_forward(self, *args, **kwargs)",
        )
        .replace(
            "        return super().prefill_forward_text(*args, **kwargs)",
            "        return run_bucketed(super().prefill_forward_text, *args, **kwargs)",
        )
        .replace("    def allocate_kv_cache(", "    @_trace\n    def allocate_kv_cache(")
        .replace(
            "\n\nclass DemoForCausalLM",
            "\n\ndef _trace(fn): ...\n\n\ndef run_bucketed(fn, *args, **kwargs):\n"
            "    x = 1\n    return fn(None, *args, **kwargs)\n\n\nclass DemoForCausalLM",
        )
    )
    src = tree(tmp_path / "checkout", adapter=adapter)
    targets = {TARGET: ("TTDemoForCausalLM",)}
    write_skeletons(src, tmp_path / "out", targets, COMMIT)
    before = _statuses(src, targets, profiles())
    assert _statuses(tmp_path / "out", targets, profiles()) == before
    statuses = {m: s for _, m, s in before}
    assert statuses["prefill_forward"] == "broken"  # the helper's None lands on tokens
    assert statuses["allocate_kv_cache"] == "unresolved"
    text = (tmp_path / "out/models/demo/tt/generator_vllm.py").read_text()
    assert "return Generator.decode_forward(self, *args, **kwargs)" in text


def test_a_skeleton_keeps_how_a_key_leaves_kwargs(tmp_path: Path) -> None:
    # A used pop is a read, a bare pop / del is not, and only one at the body's top is certain.
    adapter = ADAPTER.replace(
        "        return super().decode_forward(*args, **kwargs)",
        "        if self.x:\n"
        '            del kwargs["prompt_tokens"]\n'
        '        sp = kwargs.pop("sampling_params", None)\n'
        "        self.use(sp)\n"
        "        return super().decode_forward(*args, **kwargs)",
    )
    src = tree(tmp_path / "checkout", adapter=adapter)
    targets = {TARGET: ("TTDemoForCausalLM",)}
    write_skeletons(src, tmp_path / "out", targets, COMMIT)
    before = _statuses(src, targets, profiles())
    assert _statuses(tmp_path / "out", targets, profiles()) == before
    text = (tmp_path / "out/models/demo/tt/generator_vllm.py").read_text()
    assert "if ...: del kwargs['prompt_tokens']" in text
    assert "used(kwargs.pop('sampling_params', None))" in text  # its value is used


def test_a_skeleton_copies_a_local_mapping_passed_as_double_star(tmp_path: Path) -> None:
    # cls(**kw) with kw = dict(...) / {...}: without the binding the checker on the skeleton
    # could not count the keys (unresolved) where the checkout's run finds the break.
    init = "        optimizations=None,\n    ):\n        ..."
    for name, binding in (
        ("call", "kw = dict(vllm_context=True, max_batch_size=max_batch_size)"),
        ("literal", 'kw = {"vllm_context": True}'),
    ):
        body = f"        log(1)\n        {binding}\n        return cls(**kw)"
        adapter = edit(ADAPTER, (init, "        optimizations=None,\n    ):\n" + body))
        src = tree(tmp_path / name / "checkout", adapter=adapter)
        targets = {TARGET: ("TTDemoForCausalLM",)}
        write_skeletons(src, tmp_path / name / "out", targets, COMMIT)
        before = _statuses(src, targets, profiles())
        assert ("initialize_vllm_model", "broken") in {(m, s) for _, m, s in before}
        assert _statuses(tmp_path / name / "out", targets, profiles()) == before
        text = (tmp_path / name / "out/models/demo/tt/generator_vllm.py").read_text()
        assert "kw = {'vllm_context': ...," in text or "kw = {'vllm_context': ...}" in text
        assert "log(" not in text


@pytest.mark.parametrize(
    ("head", "body"),
    [
        (b"# -*- coding: latin-1 -*-\n", "# caf\xe9\n".encode("latin-1")),
        (b"\xef\xbb\xbf", "# caf\xe9\n".encode()),
    ],
)
def test_the_tool_decodes_a_module_as_python_does(tmp_path: Path, head: bytes, body: bytes) -> None:
    src = tree(tmp_path / "checkout")
    path = src / "models/demo/tt/generator_vllm.py"
    path.write_bytes(head + body + path.read_bytes())
    targets = {TARGET: ("TTDemoForCausalLM",)}
    written = write_skeletons(src, tmp_path / "out", targets, COMMIT)
    assert len(written) == 2
    assert _statuses(tmp_path / "out", targets, profiles()) == _statuses(src, targets, profiles())


def test_the_tool_refuses_undecodable_bytes_naming_file_and_line(tmp_path: Path) -> None:
    src = tree(tmp_path / "checkout")
    path = src / "models/demo/tt/generator_vllm.py"
    text = path.read_bytes()
    for n, bad in ((2, b'# 1\nX = "\xff"\n' + text), (4, b'# 1\n# 2\n# 3\nX = "\xff"\n' + text)):
        path.write_bytes(bad)
        match = rf"models/demo/tt/generator_vllm\.py:{n}: does not decode"
        with pytest.raises(FixtureError, match=match):
            write_skeletons(src, tmp_path / "out", {TARGET: ("TTDemoForCausalLM",)}, COMMIT)
    # In a comment the import skips the byte undecoded: so does the tool (as the checker).
    path.write_bytes(b"# 1 \xff\n" + text + b"# 2 \xff\n")
    assert len(write_skeletons(src, tmp_path / "ok", {TARGET: ("TTDemoForCausalLM",)}, COMMIT)) == 2


def test_a_skeleton_keeps_arguments_handed_to_a_held_object(tmp_path: Path) -> None:
    adapter = edit(
        ADAPTER,
        ("return super().decode_forward(*args, **kwargs)",
         "x = 1\n        return self.executor.decode_forward(*args, **kwargs)"),
    )  # fmt: skip
    src = tree(tmp_path / "checkout", adapter=adapter)
    targets = {TARGET: ("TTDemoForCausalLM",)}
    write_skeletons(src, tmp_path / "out", targets, COMMIT)
    before = _statuses(src, targets, profiles())
    assert ("decode_forward", "unresolved") in {(m, s) for _, m, s in before}
    assert _statuses(tmp_path / "out", targets, profiles()) == before
    text = (tmp_path / "out/models/demo/tt/generator_vllm.py").read_text()
    assert "return self.executor.decode_forward(*args, **kwargs)" in text


def test_the_new_trees_are_fixed_points_of_the_tool(tmp_path: Path) -> None:
    targets = registry_targets()
    prof = load_profiles()
    for name in (
        "gemma4_31b_qb2-21233e1e",
        "google_gemma_4_26b_a4b_it-eb459b3b",
        "qwen_qwen3_6_27b-dced79f1",
        "qwen36-7ce79493",
        "tt_transformers_deepseek-e851a371",
        "common_models-040a27c1",
        "deepseek_v3-01656bf7",
        "qwen25_vl-00493af6",
        "diffusion_gemma-00ca55d7",
        "gemma4-00b97ff1",
    ):
        out = tmp_path / name
        write_skeletons(SKELETONS / name, out, targets)
        assert _statuses(SKELETONS / name, targets, prof) == _statuses(out, targets, prof), name


def test_a_skeleton_keeps_a_methods_imports_of_the_plugin(tmp_path: Path) -> None:
    adapter = edit(
        ADAPTER,
        ("return super().decode_forward(*args, **kwargs)",
         "import os\n        from vllm_tt_plugin.whole_prompt_cache import A, B\n"
         "        return super().decode_forward(*args, **kwargs)"),
    )  # fmt: skip
    src = tree(tmp_path / "checkout", adapter=adapter)
    targets = {TARGET: ("TTDemoForCausalLM",)}
    write_skeletons(src, tmp_path / "out", targets, COMMIT)
    before = _statuses(src, targets, profiles())
    assert ("decode_forward", "broken") in {(m, s) for _, m, s in before}
    assert _statuses(tmp_path / "out", targets, profiles()) == before
    text = (tmp_path / "out/models/demo/tt/generator_vllm.py").read_text()
    assert "from vllm_tt_plugin.whole_prompt_cache import A, B" in text
    assert "import os" not in text
