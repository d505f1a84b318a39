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
# torchvision is not installed: text-only models do not need it, and PyPI's builds are
# CUDA-linked; tt-metal environments built from requirements-dev.txt already carry a CPU build.

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
    "$py" -m pip install --no-deps -r "$root/requirements/vllm.txt" || return 1
    "$py" -m pip install -e "$root" || return 1
    echo "install-vllm-tt.sh: done. Check: python -c 'import vllm_tt_plugin, vllm'"
}

_tt_install
