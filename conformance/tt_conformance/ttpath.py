"""The ``tt_path`` fixture's object: the plugin's counters read around a check's requests, then
its claims asserted (the claims and the counters themselves are ttmetrics.py's data model).

This is the pytest side of TT detection: a claim the launch rules out becomes a skip reported
as *not exercised*, a TT-path check on a server that is not TT a skip reported as *not
applicable*, a claimed path that did not run a failure.
"""

from __future__ import annotations

import pytest

from tt_conformance.rawhttp import RawHttp
from tt_conformance.ttmetrics import (
    NOT_APPLICABLE,
    NOT_EXERCISED,
    Claim,
    NotExercised,
    TTCounters,
    TTPluginInfo,
    TTProbe,
    parse_metrics,
)

__all__ = [
    "TTPath",
    "tt_rule",
]


class TTPath:
    """The ``tt_path`` fixture: counters around a check's requests, then its claims."""

    def __init__(self, raw_http: RawHttp, probe: TTProbe) -> None:
        self.raw_http = raw_http
        self.probe = probe
        self._before: TTCounters | None = None

    @property
    def info(self) -> TTPluginInfo:
        if self.probe.info is None:
            pytest.skip(f"{NOT_APPLICABLE}: {self.probe.absent_reason}")
        return self.probe.info

    def counters(self) -> TTCounters:
        _, counters = parse_metrics(self.raw_http.metrics_text())
        return counters

    def start(self, required: bool = True) -> None:
        """Read the counters before the requests. On a server that is not TT, a TT-path check
        (``required``) is skipped as not applicable; a generic check (``required=False``) runs
        on and its claims are not asserted."""
        if self.probe.info is None and not required:
            return
        self.info  # noqa: B018  (skips on a server that is not TT)
        self._before = self.counters()

    def conclude(self, *claims: Claim) -> None:
        """Assert every claim over the counters since start(); skip as not exercised when the
        launch rules a claimed path out (after the check's own assertions have passed)."""
        if self.probe.info is None and self._before is None:
            return  # a generic check on a server that is not TT: nothing to claim
        assert self._before is not None, "tt_path.start() was not called before the requests"
        totals = self.counters()
        delta = totals - self._before
        failures: list[str] = []
        missing: list[str] = []
        for claim in claims:
            try:
                claim.check(delta, totals, self.info)
            except NotExercised as exc:
                missing.append(f"{claim.what}: {exc}")
            except AssertionError as exc:
                failures.append(f"{claim.what}: {exc}")
        assert not failures, "the TT path this check claims did not run: " + "; ".join(failures)
        if missing:
            pytest.skip(f"{NOT_EXERCISED}: " + "; ".join(missing))


def tt_rule(rule: str, ok: bool, detail: str) -> None:
    """Assert a TT rule, naming it when it fails (e.g. "TT rejects prompt_logprobs")."""
    assert ok, f"TT rule broken: {rule}: {detail}"
