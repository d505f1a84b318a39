"""Start `vllm serve` on the host-emulated mesh, wait until healthy, always stop it.

Used by the engine tests, `tox -e emu-smoke` / `tox -e emu` and the benchmarks:

    python -m vllm_tt_plugin.emulation.server [--model DIR] [--mesh N300] [--tt JSON]
        [--vllm-arg=--max-num-seqs=8 ...] -- COMMAND ...

runs COMMAND with TT_SERVER_URL / TT_MODEL_NAME set while the server is up, then stops the
server and exits with COMMAND's status. The server listens on 127.0.0.1 on a free port.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from vllm_tt_plugin.launch import envs
from vllm_tt_plugin.utils.checkout import CheckoutFileError, checkout_path
from vllm_tt_plugin.utils.hostless import NO_TTNN_REMEDY

BUNDLED_MODEL_PATH = "fixtures/models/tt-reference-llama"
DEFAULT_TT_OPTIONS: dict[str, Any] = {"emulated_mesh": True, "register_test_models": True}
DEFAULT_STARTUP_TIMEOUT_S = 300.0
# How long stop() waits for an orderly exit (the platform's teardown reserve, vllm_patches P7,
# is 6 s) before killing the process group.
STOP_TIMEOUT_S = 45.0
# The module behind vLLM's `vllm` console script (vllm's entry_points.txt), run by this
# interpreter: the `vllm` first on PATH may belong to another environment, or be missing when a
# venv's python runs without the venv activated.
VLLM_CLI_MODULE = "vllm.entrypoints.cli.main"


class ServerStartError(RuntimeError):
    """The server exited or never became healthy; the message carries its log tail."""


def bundled_model() -> Path:
    """The reference checkpoint the emulated server serves by default (a checkout's file)."""
    return checkout_path(
        BUNDLED_MODEL_PATH,
        what="the bundled reference checkpoint",
        instead="pass a checkpoint directory (--model DIR, or EmulatedServer(model=DIR))",
    )


def host_stubs() -> Path:
    """The checkout's import-only ttnn stub, for a server started where no ttnn is installed."""
    return checkout_path("host_stubs", what="the host ttnn stub", instead=NO_TTNN_REMEDY)


def __getattr__(name: str) -> Path:
    # BUNDLED_MODEL / HOST_STUBS, as the engine tests and benchmarks import them: resolved on
    # access, so importing this module never needs a checkout (PEP 562).
    if name == "BUNDLED_MODEL":
        return bundled_model()
    if name == "HOST_STUBS":
        return host_stubs()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def vllm_command(*args: str) -> list[str]:
    """``vllm ARGS`` as this interpreter's vLLM runs it (never looked up on PATH)."""
    return [sys.executable, "-m", VLLM_CLI_MODULE, *args]


def _ttnn_importable_here() -> bool:
    return importlib.util.find_spec("ttnn") is not None


@dataclass
class EmulatedServer:
    model: Path = field(default_factory=bundled_model)
    mesh_device: str = "N300"
    tt_options: dict[str, Any] = field(default_factory=dict)
    vllm_args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    served_model_name: str | None = None
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S
    port: int = 0
    log_path: Path | None = None
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The ``vllm serve`` (API server) process, while it runs."""
        return None if self._proc is None else self._proc.pid

    @property
    def model_name(self) -> str:
        return self.served_model_name or str(self.model)

    def command(self) -> list[str]:
        options = {**DEFAULT_TT_OPTIONS, **self.tt_options}
        cmd = vllm_command(
            "serve",
            str(self.model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--additional-config",
            json.dumps({"tt": options}),
        )
        if self.served_model_name:
            cmd += ["--served-model-name", self.served_model_name]
        return cmd + list(self.vllm_args)

    def child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "MESH_DEVICE": self.mesh_device,
                "VLLM_PLUGINS": "tt,tt_model_registry",
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
            }
        )
        if not _ttnn_importable_here():
            # No tt-metal here: the import-only stub makes the TT platform selectable (without
            # it vLLM would pick another platform). Outside a checkout this names the remedy.
            parts = [str(host_stubs()), env.get("PYTHONPATH", "")]
            env["PYTHONPATH"] = os.pathsep.join(p for p in parts if p)
        env.update(self.env)
        return env

    def start(self) -> EmulatedServer:
        if self._proc is not None:
            raise RuntimeError("server already started")
        self.port = self.port or free_port()
        if self.log_path is None:
            handle, name = tempfile.mkstemp(prefix="tt-emulated-server-", suffix=".log")
            os.close(handle)
            self.log_path = Path(name)
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.child_env(),
                start_new_session=True,  # its own process group: stop() reaps engine children
            )
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def log_tail(self, lines: int = 60) -> str:
        """The root-cause error lines of the log (the first of each kind), then its tail."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        text = self.log_path.read_text(errors="replace").splitlines()
        causes: list[str] = []
        for line in text:
            if "Error:" in line and "Triton" not in line and line not in causes:
                causes.append(line)
        head = ["root cause(s):", *causes[:5], "log tail:"] if causes else []
        return "\n".join(head + text[-lines:])

    def _wait_healthy(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ServerStartError(
                    f"vllm serve exited with {self._proc.returncode} before becoming healthy; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.5)
        raise ServerStartError(
            f"vllm serve not healthy after {self.startup_timeout_s:.0f} s; "
            f"log {self.log_path}:\n{self.log_tail()}"
        )

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            # The API server alone: it shuts its engine core down in order (signalling the
            # whole group would kill the engine under it and log a spurious EngineDeadError).
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=timeout_s)
        # Engine-core children share the group; make sure none outlives the server.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        return proc.returncode

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> EmulatedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def emulated_server(**kwargs: Any) -> Iterator[EmulatedServer]:
    server = EmulatedServer(**kwargs)
    with server:
        yield server


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--model",
        type=Path,
        default=None,
        help=f"checkpoint directory (default: a checkout's {BUNDLED_MODEL_PATH})",
    )
    # The emulated server's own default (two devices), not the plugin's N150.
    parser.add_argument("--mesh", default=envs.MESH_DEVICE.raw() or "N300")
    parser.add_argument("--tt", default="{}", help="extra TT options as a JSON object")
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument(
        "--vllm-arg", action="append", default=[], help="extra `vllm serve` argument (repeatable)"
    )
    parser.add_argument("--log", type=Path, default=None, help="server log file")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND to run")
    args = parser.parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    tt_options = json.loads(args.tt)
    if not isinstance(tt_options, dict):
        parser.error("--tt must be a JSON object")
    try:
        model = args.model or bundled_model()
    except CheckoutFileError as exc:
        parser.error(str(exc))
    server = EmulatedServer(
        model=model,
        mesh_device=args.mesh,
        tt_options=tt_options,
        vllm_args=args.vllm_arg,
        served_model_name=args.served_model_name,
        log_path=args.log,
    )
    started = time.monotonic()
    with server:
        print(
            f"[tt-emulated-server] healthy at {server.url} after "
            f"{time.monotonic() - started:.1f} s (log: {server.log_path})",
            flush=True,
        )
        if not command:
            print("[tt-emulated-server] serving; Ctrl-C to stop", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while server.running:
                    time.sleep(1)
            return 0
        env = {**os.environ, "TT_SERVER_URL": server.url, "TT_MODEL_NAME": server.model_name}
        return subprocess.call(command, env=env)


if __name__ == "__main__":
    sys.exit(main())
