"""Strict readers for the harness's JSON data files (reports, expectations).

Every error names the file and the dotted path of the offending field, because these files are
edited by hand (expectations) or fed to a release gate (reports): a vague "bad JSON" costs a
release manager far more time than a precise message.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn


class DataFileError(ValueError):
    """A report or expectations file is missing, unreadable or does not match its schema."""


class FieldReader:
    """Typed accessors over parsed JSON that fail with ``<file>: field '<path>': <problem>``."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, problem: str) -> NoReturn:
        raise DataFileError(f"{self.source}: field '{path}': {problem}")

    def obj(self, value: Any, path: str, *, allowed: Iterable[str] | None = None) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(path, f"expected an object, got {_kind(value)}")
        if allowed is not None:
            allowed_set = set(allowed)
            unknown = sorted(k for k in value if k not in allowed_set)
            if unknown:
                prefix = f"{path}." if path else ""
                self.fail(
                    f"{prefix}{unknown[0]}",
                    f"unknown field (allowed: {', '.join(sorted(allowed_set))})",
                )
        return value

    def lst(self, value: Any, path: str) -> list[Any]:
        if not isinstance(value, list):
            self.fail(path, f"expected a list, got {_kind(value)}")
        return value

    def require(self, data: dict[str, Any], key: str, path: str) -> Any:
        if key not in data:
            self.fail(_join(path, key), "missing required field")
        return data[key]

    def string(
        self, data: dict[str, Any], key: str, path: str = "", *, nonempty: bool = False
    ) -> str:
        value = self.require(data, key, path)
        if not isinstance(value, str):
            self.fail(_join(path, key), f"expected a string, got {_kind(value)}")
        if nonempty and not value.strip():
            self.fail(_join(path, key), "must not be empty")
        return value

    def opt_string(self, data: dict[str, Any], key: str, path: str = "") -> str | None:
        value = data.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            self.fail(_join(path, key), f"expected a string or null, got {_kind(value)}")
        return value

    def integer(
        self, data: dict[str, Any], key: str, path: str = "", *, minimum: int | None = None
    ) -> int:
        value = self.require(data, key, path)
        return self._int(value, _join(path, key), minimum)

    def opt_integer(
        self, data: dict[str, Any], key: str, path: str = "", *, minimum: int | None = None
    ) -> int | None:
        value = data.get(key)
        if value is None:
            return None
        return self._int(value, _join(path, key), minimum)

    def number(
        self, data: dict[str, Any], key: str, path: str = "", *, minimum: float | None = None
    ) -> float:
        value = self.require(data, key, path)
        return self.as_number(value, _join(path, key), minimum)

    def as_number(self, value: Any, path: str, minimum: float | None = None) -> float:
        # bool is an int subclass; true/false in a numeric field is always a mistake.
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(path, f"expected a number, got {_kind(value)}")
        if not math.isfinite(value):
            self.fail(path, f"expected a finite number, got {value!r}")
        if minimum is not None and value < minimum:
            self.fail(path, f"must be >= {minimum}, got {value!r}")
        return float(value)

    def choice(self, data: dict[str, Any], key: str, choices: Iterable[str], path: str = "") -> str:
        value = self.string(data, key, path)
        options = tuple(choices)
        if value not in options:
            self.fail(_join(path, key), f"expected one of {', '.join(options)}, got {value!r}")
        return value

    def _int(self, value: Any, path: str, minimum: int | None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"expected an integer, got {_kind(value)}")
        if minimum is not None and value < minimum:
            self.fail(path, f"must be >= {minimum}, got {value}")
        return value


def read_json_file(path: Path, what: str) -> Any:
    """Parse a JSON file, turning every I/O and syntax problem into a DataFileError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataFileError(f"{path}: {what} file not found") from None
    except OSError as exc:
        raise DataFileError(f"{path}: cannot read {what} file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise DataFileError(f"{path}: {what} file is not UTF-8: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataFileError(
            f"{path}: {what} file is not valid JSON "
            f"(line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return f"a string ({value!r})" if len(value) <= 40 else "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
