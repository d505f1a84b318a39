"""The harness tests' fake OpenAI server (conftest.py) in a process of its own, for tests that
kill the server under test mid-run: ``python -m tests.conformance.fake_server_process`` prints
its port and serves until killed."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import requests

from tests.conformance.conftest import fake_httpd, fake_state

REPO = Path(__file__).resolve().parents[2]


@dataclass
class FakeServerProcess:
    proc: subprocess.Popen[str]
    url: str

    def control(self, **fields: int) -> None:
        """Change the running server's behaviour (``health_status=503``: turns unhealthy)."""
        requests.post(f"{self.url}/_control", json=fields, timeout=10).raise_for_status()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


@contextlib.contextmanager
def fake_server_process() -> Iterator[FakeServerProcess]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.conformance.fake_server_process"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline().strip())
        yield FakeServerProcess(proc, f"http://127.0.0.1:{port}")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def main() -> None:
    httpd = fake_httpd(fake_state())
    print(httpd.server_address[1], flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
