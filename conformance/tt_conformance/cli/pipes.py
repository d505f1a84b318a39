"""A CLI's exit code is its verdict, whether or not its output can be written.

``tt-conformance-gate ... 2>&1 | head -c 100`` closes the pipe while a long refusal is being
written: Python raises BrokenPipeError from the write, the refusal's ``return 2`` is never
reached and the process exits 1 -- a bad input read as a regression (or, for a stdout closed
under an OK, as a failure). ``keeps_verdict`` wraps a CLI's ``main``: while it runs, a write
or flush to a closed pipe is dropped (and the stream's descriptor pointed at /dev/null, so
the interpreter's own flush at exit cannot fail either), and ``main`` returns its code.
"""

from __future__ import annotations

import errno
import functools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO, TypeVar, cast

__all__ = ["keeps_verdict", "pipe_safe_streams"]

F = TypeVar("F", bound=Callable[..., int])


class _PipeSafe:
    """A text stream whose writes to a closed pipe are dropped (other errors still raise)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self._stream.write(text)
            except OSError as e:
                self._closed(e)
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except OSError as e:
                self._closed(e)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def _closed(self, error: OSError) -> None:
        if error.errno != errno.EPIPE:
            raise error
        self.broken = True
        # What the stream still buffers goes to /dev/null at exit, not to the closed pipe
        # (Python reports a failed flush at shutdown with exit code 120).
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._stream.fileno())
            finally:
                os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass  # not a descriptor-backed stream (a test's capture): nothing flushes it later


@contextmanager
def pipe_safe_streams() -> Iterator[None]:
    """sys.stdout and sys.stderr made pipe-safe for the block, restored after it."""
    saved = sys.stdout, sys.stderr
    out, err = _PipeSafe(saved[0]), _PipeSafe(saved[1])
    sys.stdout, sys.stderr = cast(TextIO, out), cast(TextIO, err)
    try:
        yield
    finally:
        out.flush()
        err.flush()
        sys.stdout, sys.stderr = saved


def keeps_verdict(main: F) -> F:
    """``main`` run with pipe-safe streams: its return code (or SystemExit) is the exit code."""

    @functools.wraps(main)
    def run(*args: Any, **kwargs: Any) -> int:
        with pipe_safe_streams():
            return main(*args, **kwargs)

    return cast(F, run)
