"""The published JSON schemas, generated from the pydantic models (report.py, expectations.py).

    python -m tt_conformance.schema [--check] [DIR ...]

writes ``report.schema.json`` and ``expectations.schema.json`` into this package's ``schemas/``
directory and each DIR (the repository passes ``docs/``), and the check modules' manifest
(``checks/MANIFEST.json``, selection.py: what coverage counts as the suite, each module's
digest); ``--check`` only compares and exits 1 when a file is stale (tests run it, so the
shipped schemas and manifest never drift from the models and the check modules).

The shipped files are read through ``importlib.resources`` (:func:`load_schema`), so they load
from an installed wheel as from the checkout.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tt_conformance.cli.pipes import keeps_verdict
from tt_conformance.expectations import Expectations
from tt_conformance.report import Report
from tt_conformance.selection import CHECKS_PACKAGE, MANIFEST_NAME, manifest_text
from tt_conformance.writers import atomic_write_text

if TYPE_CHECKING:
    from importlib.abc import Traversable

__all__ = [
    "SCHEMAS",
    "load_schema",
    "main",
    "packaged_schemas",
    "rendered",
    "schema_of",
]

SCHEMAS: dict[str, type] = {
    "report.schema.json": Report,
    "expectations.schema.json": Expectations,
}


def schema_of(model: Any, title: str) -> dict[str, Any]:
    schema = model.model_json_schema(mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://github.com/tenstorrent/vllm-tt-plugin/schemas/{title}",
        **schema,
    }


def packaged_schemas() -> Traversable:
    """This package's ``schemas/`` directory, wherever the package is installed."""
    return resources.files("tt_conformance") / "schemas"


def load_schema(name: str) -> dict[str, Any]:
    """A shipped schema (one of SCHEMAS), parsed."""
    if name not in SCHEMAS:
        raise ValueError(f"unknown schema {name!r}: expected one of {', '.join(SCHEMAS)}")
    body: dict[str, Any] = json.loads((packaged_schemas() / name).read_text(encoding="utf-8"))
    return body


def rendered() -> dict[str, str]:
    return {
        name: json.dumps(schema_of(model, name), indent=2, sort_keys=True) + "\n"
        for name, model in SCHEMAS.items()
    }


@keeps_verdict
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("dirs", nargs="*", type=Path)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    stale = []
    directories: list[Traversable] = [packaged_schemas(), *args.dirs]
    for directory in directories:
        for name, text in rendered().items():
            path = directory / name
            current = path.read_text(encoding="utf-8") if path.is_file() else None
            if current == text:
                continue
            if args.check:
                stale.append(str(path))
            else:
                # Writing needs a real directory: a checkout's package or a DIR argument.
                atomic_write_text(Path(str(path)), text)
                print(f"wrote {path}")
    manifest = resources.files(CHECKS_PACKAGE) / MANIFEST_NAME
    current = manifest.read_text(encoding="utf-8") if manifest.is_file() else None
    if current != manifest_text():
        if args.check:
            stale.append(str(manifest))
        else:
            atomic_write_text(Path(str(manifest)), manifest_text())
            print(f"wrote {manifest}")
    if stale:
        print("stale schema files (run python -m tt_conformance.schema docs): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
