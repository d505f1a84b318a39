"""Controller-side session reporter: collects every test report and writes the run's report."""

from __future__ import annotations

from typing import Any

import pytest

from tt_conformance.abort import WORKEROUTPUT_KEY, AbortInfo
from tt_conformance.bars import file_digest
from tt_conformance.baseline import gate_run
from tt_conformance.committed import repo_relative
from tt_conformance.names import harness_commit, installed_version
from tt_conformance.provenance import run_info
from tt_conformance.report import Aborted, Report, ServerSnapshot, Versions, utc_now_iso
from tt_conformance.selection import DESELECTED_KEY, coverage_of, installed_suite
from tt_conformance.situations import run_situations
from tt_conformance.state import HarnessState
from tt_conformance.tiers import derive_tier, evaluate_targets
from tt_conformance.writers import write_report

__all__ = ["SessionReporter"]


class SessionReporter:
    """Registered only in the controller (or the single process when xdist is not used)."""

    def __init__(self, state: HarnessState) -> None:
        assert state.collector is not None and state.report_dir is not None
        self.state = state
        self.collector = state.collector

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Under xdist this runs for every report a worker forwards to the controller.
        self.collector.add_test_report(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self.collector.add_collect_report(report)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """xdist controller: a worker that stopped because the server went away says why."""
        output = getattr(node, "workeroutput", {})
        # Every worker collects the whole selection and deselects the same checks.
        self.state.deselected = max(self.state.deselected, int(output.get(DESELECTED_KEY, 0)))
        data = output.get(WORKEROUTPUT_KEY)
        if data is None:
            return
        info = AbortInfo.from_json(data)
        if self.state.worker_abort is None or info.at < self.state.worker_abort.at:
            self.state.worker_abort = info

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not self.collector.executed and not self.collector.collection_errors:
            # --collect-only, or a selection that ran nothing: no report, latest.* untouched.
            return
        report = self.build_report(
            int(exitstatus), int(session.testscollected), _selection(session.config)
        )
        assert self.state.report_dir is not None
        self.state.written = write_report(report, self.state.report_dir)
        if self.state.options.gate:
            self.gate = gate_run(
                report, self.state.options.baselines_dir, frozenset(self.state.options.gate_axes)
            )
            if self.gate.exit_code and int(session.exitstatus) in (0, 1):
                session.exitstatus = self.gate.exit_code

    def build_report(
        self,
        exit_status: int,
        collected: int | None = None,
        selection: tuple[str | None, str | None, tuple[str, ...]] = (None, None, ()),
    ) -> Report:
        state = self.state
        checks, perf, warnings = self.collector.build()
        abort = state.abort
        aborted = None
        if abort is not None:
            aborted = Aborted(
                reason=abort.reason,
                at=abort.at,
                during=abort.during,
                not_run=None if collected is None else max(0, collected - len(checks)),
            )
        facts = state.facts
        suite = installed_suite()
        # The server's own facts first (a not-TT server's warning leads), then the run's.
        warnings[:0] = facts.warnings
        if state.setup_error:
            warnings.insert(0, f"server not usable: {state.setup_error}")
        for entry in state.expectations.unmatched([c.id for c in checks]):
            warnings.append(f"expectations entry {entry.check!r} matched no check in this run")
        for key, ours in (("model", state.model_name), ("device", state.device)):
            theirs = getattr(state.expectations, key)
            if theirs is not None and theirs != ours:
                warnings.append(f"expectations file is for {key} {theirs!r}, this run is {ours!r}")
        flagged: dict[tuple[str, str], list[str]] = {}
        for name, fig in sorted(perf.items()):
            if fig.flag:
                flagged.setdefault((name.partition("@")[2], fig.flag), []).append(name)
        warnings += [
            f"{len(names)} perf figures @{shape} are unreliable, not comparable: {flag}"
            for (shape, flag), names in flagged.items()
        ]
        situations, uncounted = None, None
        if state.probe is not None and abort is None:
            situations, uncounted = run_situations(
                state.probe.situations, state.options.server_url or "", state.options.api_key
            )
        if uncounted:
            warnings.append(uncounted)
        report = Report(
            run_id=state.run_id,
            started_at=state.started_at,
            finished_at=utc_now_iso(),
            model=state.model_name,
            device=state.device,
            mesh_shape=facts.mesh_shape,
            versions=Versions(
                vllm=(state.probe.vllm_version if state.probe else None) or "unknown",
                plugin=facts.plugin_version,
                plugin_commit=facts.plugin_commit,
                vllm_commit=facts.vllm_commit,
                ttnn=facts.ttnn_version,
                tt_metal=facts.tt_metal_version,
                harness=installed_version(),
                harness_commit=harness_commit(),
            ),
            server=ServerSnapshot(
                url=state.options.server_url or "",
                max_num_seqs=facts.max_num_seqs,
                lanes=facts.lanes,
                max_model_len=facts.max_model_len,
                model_class=facts.model_class,
                mesh_device=facts.mesh_device,
                tt_options=facts.tt_options,
                weights=facts.weights,
                async_scheduling=facts.async_scheduling,
                chunked_prefill=facts.chunked_prefill,
                prefix_caching=facts.prefix_caching,
                tensor_parallel=facts.tensor_parallel,
                data_parallel=facts.data_parallel,
                discovered=facts.discovered,
            ),
            run=run_info(state.options.args, state.options.cwd),
            server_options=state.options.server_options,
            # Repository-relative inside the harness's checkout: the committed copy at the
            # recorded harness commit is then found by name on any machine (bars.py).
            expectations_file=(
                repo_relative(state.expectations_path) if state.expectations_path else None
            ),
            expectations_digest=(
                file_digest(state.expectations_path) if state.expectations_path else None
            ),
            exit_status=exit_status,
            checks=tuple(checks),
            perf=perf,
            accuracy=tuple(self.collector.accuracy()),
            collection_errors=tuple(self.collector.collection_errors),
            warnings=tuple(warnings),
            aborted=aborted,
            situations=situations,
            matrix_cells=self.collector.cells(),
            coverage=coverage_of(
                checks,
                deselected=state.deselected,
                keyword=selection[0],
                markers=selection[1],
                args=selection[2],
                suite=suite.modules,
                modified=suite.modified,
                device=state.device,
                lanes=facts.lanes,
                model_class=facts.model_class,
            ),
        )
        report = report.replace(perf_targets=evaluate_targets(report, state.expectations))
        return report.replace(tier=derive_tier(report))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        written = self.state.written
        if written is None:
            return
        terminalreporter.section("tt-conformance report")
        terminalreporter.write_line(f"report:   {written.json}")
        terminalreporter.write_line(f"markdown: {written.markdown}")
        terminalreporter.write_line(f"junit:    {written.junit}")
        gate = getattr(self, "gate", None)
        if gate is not None:
            terminalreporter.section("tt-conformance gate")
            for line in gate.text.splitlines():
                terminalreporter.write_line(line, red=bool(gate.exit_code))
        aborted = self.state.abort
        if aborted is not None:
            terminalreporter.write_line(
                f"RUN ABORTED: {aborted.reason} (during {aborted.during or 'no check'}); the "
                "report holds the checks that ran",
                red=True,
            )
        if self.state.setup_error:
            terminalreporter.write_line(f"server not usable: {self.state.setup_error}", red=True)
        elif self.state.not_tt:
            terminalreporter.write_line(
                f"NOT A TT SERVER, not certified: {self.state.tt.absent_reason}. TT-path checks "
                "were not applicable; generic checks ran; the report is not labelled as TT "
                "hardware.",
                red=True,
            )


def _selection(config: pytest.Config) -> tuple[str | None, str | None, tuple[str, ...]]:
    """-k, -m and the positional arguments pytest was given (the report's coverage)."""
    keyword = config.getoption("keyword", None) or None
    markers = config.getoption("markexpr", None) or None
    return keyword, markers, tuple(str(a) for a in config.args)
