"""Write README.md's generated tables from the code: `python tools/gen_docs.py [--check]`.

Each table sits between `<!-- BEGIN GENERATED <name> ... -->` and `<!-- END GENERATED <name> -->`
markers and is rewritten in place:

- `envs`: every environment variable the plugin reads (`vllm_tt_plugin.launch.envs.REGISTRY`), with
  the family selectors' defaults and values taken from the model registry;
- `selectors`: what each family selector value serves (`model_registry.selector_table()`);
- `tt_options`: every `--additional-config '{"tt": {...}}'` option (`config.option_specs()`),
  its type, default (`config.TTOptions`), accepted values and purpose;
- `harness_envs`: every environment variable the conformance harness reads or sets
  (`tt_conformance.envs.REGISTRY`).

`--check` writes nothing and exits 1 when README.md differs from what the code says.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from tt_conformance import envs as harness_envs
from vllm_tt_plugin import config, model_registry
from vllm_tt_plugin.launch import envs

README = Path(__file__).resolve().parents[1] / "README.md"


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def envs_table() -> str:
    selectors = model_registry.selector_versions()
    lines = [_row(("Variable", "Type", "Default", "What it does")), "|---|---|---|---|"]
    for var in envs.REGISTRY.values():
        default = var.shown_default
        doc = var.doc
        if var.name in selectors:  # the registry owns the accepted values
            values = selectors[var.name]
            default = values[0]
            doc += " Values: " + ", ".join(f"`{v}`" for v in values) + "."
        shown = "unset" if default is None else f"`{default}`"
        lines.append(_row((f"`{var.name}`", var.type_name, shown, doc)))
    return "\n".join(lines)


def selectors_table() -> str:
    header = ("Variable", "Value", "Architecture", "Target", "Lanes")
    lines = [_row(header), "|---|---|---|---|---|"]
    for var, versions in model_registry.selector_table().items():
        for i, (version, archs) in enumerate(versions.items()):
            shown = f"`{version}`" + (" (default)" if i == 0 else "")
            for arch, (target, lanes) in archs.items():
                row = (f"`{var}`", shown, f"`{arch}`", f"`{target}`", "yes" if lanes else "no")
                lines.append(_row(row))
    return "\n".join(lines)


def _json_value(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    return f"`{value}`"


def tt_options_table() -> str:
    lines = [
        _row(("Key", "Type", "Default", "Accepted values", "Purpose")),
        "|---|---|---|---|---|",
    ]
    for key, spec in config.option_specs().items():
        default = _json_value(config.option_default(key))
        lines.append(_row((f"`{key}`", spec.type_name, default, spec.allowed_doc, spec.doc)))
    return "\n".join(lines)


def harness_envs_table() -> str:
    lines = [_row(("Variable", "Type", "Default", "What it does")), "|---|---|---|---|"]
    for var in harness_envs.REGISTRY.values():
        default = var.shown_default
        shown = "unset" if default is None else f"`{default}`"
        lines.append(_row((f"`{var.name}`", var.type_name, shown, var.doc)))
    return "\n".join(lines)


TABLES: dict[str, Callable[[], str]] = {
    "envs": envs_table,
    "selectors": selectors_table,
    "tt_options": tt_options_table,
    "harness_envs": harness_envs_table,
}


def _block(name: str) -> re.Pattern[str]:
    return re.compile(
        rf"(<!-- BEGIN GENERATED {name}\b[^>]*-->\n)(.*?)(<!-- END GENERATED {name} -->)",
        re.DOTALL,
    )


def render(text: str) -> str:
    """``text`` with every generated block rewritten; a missing marker pair is an error."""
    for name, make in TABLES.items():
        pattern = _block(name)
        if not pattern.search(text):
            raise ValueError(f"README has no '<!-- BEGIN GENERATED {name} -->' block")
        text = pattern.sub(lambda m, make=make: f"{m.group(1)}{make()}\n{m.group(3)}", text)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if README.md is stale")
    parser.add_argument("--readme", type=Path, default=README)
    args = parser.parse_args(argv)
    current = args.readme.read_text()
    wanted = render(current)
    if wanted == current:
        return 0
    if args.check:
        print(f"{args.readme} is stale: run python tools/gen_docs.py", file=sys.stderr)
        return 1
    args.readme.write_text(wanted)
    print(f"wrote {args.readme}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
