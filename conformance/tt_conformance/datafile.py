"""Reading the harness's JSON data files (reports, expectations) and phrasing validation errors.

Every error names the file and the dotted path of the offending field, because these files are
edited by hand (expectations) or fed to a release gate (reports): a vague "bad JSON" costs a
release manager far more time than a precise message. Validation itself is pydantic's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = [
    "DataFileError",
    "Strict",
    "describe",
    "dotted",
    "read_json_file",
    "validate_file_data",
]

M = TypeVar("M", bound=BaseModel)


class DataFileError(ValueError):
    """A report or expectations file is missing, unreadable or does not match its schema."""


class Strict(BaseModel):
    """Base of every published model: immutable, unknown fields refused, no NaN/inf. Files are
    validated with ``strict=True`` (see `validate_file_data`): no silent coercion of strings to
    numbers or booleans to integers, a hand-edited file means what it says."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


def dotted(loc: tuple[Any, ...]) -> str:
    """pydantic's error location as ``checks[1].outcome`` / ``perf.ttft@c1.value``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and part.startswith(("function-", "tagged-union")):
            continue  # validator wrappers pydantic puts into the path
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def describe(exc: ValidationError, source: str) -> str:
    """The first problem as ``<file>: field '<path>': <message>`` (+ how many more)."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    message = first["msg"]
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    if first["type"] == "value_error":
        message = message.removeprefix("Value error, ")
        if message.startswith("field '"):  # a model-level check that names its own field
            return f"{source}: {message}{more}"
    if first["type"] == "missing":
        message = "missing required field"
    elif first["type"] == "extra_forbidden":
        message = "unknown field"
    return f"{source}: field '{dotted(tuple(first['loc']))}': {message}{more}"


def validate_file_data(model: type[M], data: Any, source: str, error: type[DataFileError]) -> M:
    """Validate parsed JSON against ``model`` with JSON's own typing rules (strict)."""
    try:
        return model.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as exc:
        raise error(describe(exc, source)) from None
    except ValueError as exc:  # json.dumps of a NaN is fine; this catches model-level checks
        raise error(f"{source}: {exc}") from None


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
