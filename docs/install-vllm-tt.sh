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
# installs the CPU build with --no-deps at the version that pairs with the env's torch, from the
# PyTorch CPU index (TT_INSTALL_TORCHVISION=0 skips this). Environments built from tt-metal's
# requirements-dev.txt already carry it. Elsewhere it is not installed: text-only models do not
# need it, and PyPI's torchvision builds are CUDA-linked and break `import vllm.config` on a
# CPU-only host.

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
        local tv
        tv="$("$py" -c "import torch; v = torch.__version__.split('+')[0].split('.'); print(f'0.{int(v[1]) + 15}.*')")" || return 1
        echo "install-vllm-tt.sh: tt-metal env without torchvision; installing the CPU build $tv"
        "$py" -m pip install --no-deps "torchvision==$tv" \
            --index-url https://download.pytorch.org/whl/cpu || return 1
    fi
    "$py" -m pip install --no-deps -r "$root/requirements/vllm.txt" || return 1
    "$py" -m pip install -e "$root" || return 1
    echo "install-vllm-tt.sh: done. Check: python -c 'import vllm_tt_plugin, vllm'"
}

_tt_install
