"""Retries for checks that the expectations file lists as flaky.

Only the final attempt's reports are logged (so terminal, JUnit and the report agree); the
attempt count and the earlier failures ride along in user_properties, and the collector turns
"passed after a failure" into the outcome `flaky`, never a plain pass.
"""

from __future__ import annotations

import pytest

# runtestprotocol is pytest's own setup/call/teardown driver; there is no public equivalent
# for running one item again, and re-implementing it would drift from pytest's behaviour.
from _pytest.runner import runtestprotocol

from tt_conformance.collector import PROP_ATTEMPTS, PROP_RETRIED, crash_message


def run_with_retries(item: pytest.Item, nextitem: pytest.Item | None, retries: int) -> bool:
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    # Properties set at collection (check id, concern) survive; a failed attempt's perf
    # figures do not.
    base_properties = list(item.user_properties)
    failures: list[str] = []
    attempt = 0
    while True:
        attempt += 1
        item.user_properties[:] = base_properties
        # Tearing down towards the real next item keeps fixture state exactly as pytest would;
        # a retry simply sets the item (and anything torn down) up again.
        reports = runtestprotocol(item, nextitem=nextitem, log=False)
        failed = [r for r in reports if r.failed]
        if not failed or attempt > retries:
            break
        if item.session.shouldstop or item.session.shouldfail:
            break
        failures.append(f"attempt {attempt}: {crash_message(failed[0])}")
    for report in reports:
        report.user_properties.append((PROP_ATTEMPTS, attempt))
        report.user_properties.extend((PROP_RETRIED, text) for text in failures)
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True
