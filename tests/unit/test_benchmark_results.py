"""Benchmarks and tools that cannot lose their results: vLLM's CLI comes from this interpreter
(never from PATH), and a benchmark's JSON is rewritten atomically after every part, so a part
that fails later keeps what was measured before it."""

from __future__ import annotations

import ast
import importlib.util
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

import pytest

from benchmarks import host_overhead as ho
from benchmarks import lane_scheduler as ls
from benchmarks.results import write_json
from vllm_tt_plugin.emulation.server import VLLM_CLI_MODULE, EmulatedServer, vllm_command

REPO = Path(__file__).resolve().parents[2]
# The newest committed run: the shape every run's JSON keeps (older readers, the docs' tables).
COMMITTED_RUN = REPO / "docs" / "benchmarks" / "host_overhead_2026-12-03T1253.json"


@pytest.fixture
def no_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """PATH empty and any PATH lookup a failure: the env's python run without the env active."""

    def which(*args: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError(f"looked up on PATH: {args}")

    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(shutil, "which", which)


# --- vLLM's CLI --------------------------------------------------------------------------------
def test_the_vllm_cli_is_this_interpreter_running_vllms_module(no_path: None) -> None:
    cli = [sys.executable, "-m", VLLM_CLI_MODULE]
    assert vllm_command("bench", "serve") == [*cli, "bench", "serve"]
    assert Path(sys.executable).is_absolute()
    assert EmulatedServer(port=1).command()[:4] == [*cli, "serve"]
    bench = ho.serve_command(Path("out"), "http://127.0.0.1:1")
    assert bench[:5] == [*cli, "bench", "serve"]
    assert bench[bench.index("--base-url") + 1] == "http://127.0.0.1:1"


def test_the_cli_module_is_the_vllm_console_script_and_runs_as_main() -> None:
    """The installed vLLM's `vllm` script calls this module's main(), and ``python -m`` runs it
    (read from the source: importing vLLM's CLI here would cost seconds)."""
    (script,) = metadata.entry_points(group="console_scripts", name="vllm")
    assert (script.module, script.attr) == (VLLM_CLI_MODULE, "main")
    spec = importlib.util.find_spec(VLLM_CLI_MODULE)
    assert spec is not None and spec.origin is not None
    guards = [
        node
        for node in ast.parse(Path(spec.origin).read_text()).body
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
    ]
    assert guards and "main()" in ast.unparse(guards[0])


# --- the atomic writer -------------------------------------------------------------------------
def test_a_failed_write_leaves_the_previous_file_and_no_temp_file(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    write_json(out, {"rows": [1]})
    with pytest.raises(TypeError):
        write_json(out, {"rows": [object()]})  # not JSON: nothing is replaced
    assert json.loads(out.read_text()) == {"rows": [1]}
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


# --- host_overhead.py: every part saved as it finishes ------------------------------------------
def row(config: ho.Config, async_on: bool, step_ms: float) -> ho.Row:
    return ho.Row(
        batch=config.seqs * config.lanes, lanes=config.lanes,
        api_servers=config.api_server_count, step_ms=step_ms, async_=async_on,
        decode_step_ms=step_ms + 1.0, run_step_ms=step_ms + 1.5, client_step_ms=step_ms + 2.0,
        plugin_ms=0.3, vllm_ms=0.4, plugin_cpu_ms=0.2, vllm_cpu_ms=0.3, model_call_ms=0.1,
        phases_ms={}, cpu_budget={},
    )  # fmt: skip


class Stubs:
    """The measured parts of host_overhead.py, stubbed at their boundary (no server, no
    subprocess), ``fail`` naming the part that raises."""

    def __init__(self, fail: str) -> None:
        self.fail = fail
        self.engine_points = 0

    def measure_server(
        self, config: ho.Config, async_on: bool, steps_ms: Any, args: Any, workdir: Path
    ) -> Iterator[ho.Row]:
        for step_ms in steps_ms:
            yield row(config, async_on, step_ms)

    def engine_only(self, batch: int, step_ms: float, async_on: bool, log: Path,
                    churn: bool = False) -> dict[str, Any]:  # fmt: skip
        self.engine_points += 1
        if self.fail == "engine_only" and self.engine_points == 2:
            raise RuntimeError("engine_only.py failed")
        return {"batch": batch, "step_ms": step_ms, "async": async_on, "churn": churn,
                "decode_step_ms": 1.0, "plugin_ms": 0.1, "plugin_cpu_ms": 0.1, "vllm_ms": 0.1,
                "vllm_cpu_ms": 0.1, "model_call_ms": 0.1}  # fmt: skip

    def bench_serve(self, workdir: Path) -> dict[str, Any]:
        if self.fail == "serve":  # what the run hit with no `vllm` on PATH
            raise FileNotFoundError(2, "No such file or directory", "vllm")
        return {"step_ms": ho.SERVE_STEP_MS, "batch": 32, "async": True, "mean_ttft_ms": 9.0}


def run_host_overhead(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fail: str
) -> tuple[Path, BaseException | None]:
    stubs = Stubs(fail)
    monkeypatch.setattr(ho, "measure_server", stubs.measure_server)
    monkeypatch.setattr(ho, "engine_only", stubs.engine_only)
    monkeypatch.setattr(ho, "bench_serve", stubs.bench_serve)
    monkeypatch.setattr(ho, "after_sleep", lambda: {"5": 1.1, "17": 1.2, "40": 1.3})
    monkeypatch.setattr(ho.tempfile, "mkdtemp", lambda prefix: str(tmp_path))
    out = tmp_path / "run.json"
    argv = ["--json", str(out), "--configs", "1,4x32/1", "--steps-ms", "5", "17"]
    try:
        ho.main(argv)
    except (RuntimeError, FileNotFoundError) as exc:
        return out, exc
    return out, None


def test_a_failing_bench_serve_keeps_every_part_measured_before_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    out, error = run_host_overhead(monkeypatch, tmp_path, fail="serve")
    assert isinstance(error, FileNotFoundError)  # the run still fails, loudly
    doc = json.loads(out.read_text())
    # 2 configs x async off/on x 2 step times, every engine-alone point, the machine both sides
    assert len(doc["rows"]) == 8
    assert {(r["batch"], r["async"], r["step_ms"]) for r in doc["rows"]} >= {(128, True, 17.0)}
    points = len(ho.ENGINE_ONLY_BATCHES) * len(ho.ENGINE_ONLY_POINTS)
    assert len(doc["engine_only"]) == points + len(ho.ENGINE_ONLY_CHURN_BATCHES)
    assert set(doc["machine_slowdown"]) == {"before", "after"}
    assert doc["serve"] is None
    assert "| 4x32/1 | 17 | on |" in ho.markdown(doc)  # the docs' tables render it
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_failing_engine_point_keeps_the_server_rows_and_the_points_before(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    out, error = run_host_overhead(monkeypatch, tmp_path, fail="engine_only")
    assert isinstance(error, RuntimeError)
    doc = json.loads(out.read_text())
    assert len(doc["rows"]) == 8 and len(doc["engine_only"]) == 1
    assert set(doc["machine_slowdown"]) == {"before"}  # the end of the run never came


def test_a_complete_run_has_the_shape_of_the_committed_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    out, error = run_host_overhead(monkeypatch, tmp_path, fail="")
    assert error is None
    doc = json.loads(out.read_text())
    committed = json.loads(COMMITTED_RUN.read_text())
    assert list(doc) == list(committed)
    assert set(doc["rows"][0]) == set(committed["rows"][0])
    assert doc["serve"]["mean_ttft_ms"] == 9.0


class FakeServer:
    url = "http://127.0.0.1:1"

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


@pytest.mark.parametrize("completed", [0, ho.SERVE_PROMPTS])
def test_bench_serve_refuses_a_result_with_failed_requests(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, completed: int
) -> None:
    """`vllm bench serve` exits 0 when every request failed (no server, a wrong URL): its
    figures are then not recorded as the run's."""
    ran: list[list[str]] = []

    def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        ran.append(cmd)
        result_dir = Path(cmd[cmd.index("--result-dir") + 1])
        (result_dir / "serve.json").write_text(
            json.dumps({"completed": completed, "failed": 32 - completed, "mean_ttft_ms": 9.0})
        )
        return subprocess.CompletedProcess(cmd, 0, "All requests failed.", "")

    monkeypatch.setattr(ho, "server_for", lambda *args: FakeServer())
    monkeypatch.setattr(ho.subprocess, "run", run)
    if completed:
        assert ho.bench_serve(tmp_path)["mean_ttft_ms"] == 9.0
    else:
        with pytest.raises(RuntimeError, match="completed 0 of 32 requests"):
            ho.bench_serve(tmp_path)
    assert ran[0][:5] == vllm_command("bench", "serve")


# --- lane_scheduler.py: the headline figures survive a failing --segments part -----------------
def test_a_failing_segments_part_keeps_the_lane_benchmarks_headline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for key, value in ls.ENV.items():
        monkeypatch.setenv(key, value)  # main() sets them; monkeypatch restores them after

    def segments(sched: Any, steps: int) -> NoReturn:
        raise RuntimeError("segment wrapper failed")

    monkeypatch.setattr(ls, "build_scheduler", lambda lanes, seqs: object())
    monkeypatch.setattr(ls, "admit", lambda sched, batch: None)
    sample = ls.Sample(10.0, dict.fromkeys(ls.PHASES, 1.0))
    monkeypatch.setattr(ls, "timed", lambda sched, steps: sample)
    monkeypatch.setattr(ls, "timed_segments", segments)
    out = tmp_path / "lanes.json"
    with pytest.raises(RuntimeError, match="segment wrapper"):
        ls.main(["--json", str(out), "--segments", "--rounds", "1", "--steps", "2"])
    doc = json.loads(out.read_text())
    assert doc["ratio"] == 1.0 and doc["batch"] == 128
    assert "segments_us" not in doc
