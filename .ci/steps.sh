#!/usr/bin/env bash
# One function per CI step. tools/ci_run.py runs `bash .ci/steps.sh STEP` in the order, with the
# overlap and against the budgets that .ci/plan.json gives; each step's output goes to its own log
# (reports/artifacts/ci/logs/STEP.log). Run one by hand the same way: `bash .ci/steps.sh unit`.
set -euo pipefail
cd "$(dirname "$0")/.."

art=${CI_ARTIFACTS:-$PWD/reports/artifacts/ci}
junit="$art/junit"
mkdir -p "$junit"

# A pyenv interpreter of version $1 (3.10, 3.12), else one on PATH; empty when there is none.
python_of() {
    local found
    found=$(ls -d "$(pyenv root 2>/dev/null || echo /root/.pyenv)"/versions/"$1"*/bin/python"$1" 2>/dev/null | head -n 1 || true)
    if [ -z "$found" ]; then found=$(command -v "python$1" || true); fi
    echo "$found"
}

step_tox() {
    python3 -m pip install --quiet --disable-pip-version-check -r requirements/lock/tox.txt
}

# Headless Chromium for the published site's browser test (Debian's package).
step_chromium() {
    if command -v chromium >/dev/null 2>&1; then echo "chromium is installed"; return; fi
    local sudo_=""
    if [ "$(id -u)" != 0 ]; then sudo_="sudo"; fi
    $sudo_ apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq chromium >/dev/null
}

# The one environment behind unit, emu, mutants, emu-smoke and engine (tools/shared_env.py), built
# from the committed locks; the tox environments that use it find it current.
step_shared_env() {
    python3 tools/shared_env.py .tox/vllm-cpu
}

# The README's test command (with the site's browser test: TT_REQUIRE_BROWSER makes a missing
# browser fail instead of skip; screenshots land in reports/artifacts/).
step_unit() {
    TT_REQUIRE_BROWSER=1 tox -e unit -- --junitxml="$junit/unit.xml"
}

# The published site from the committed reports, written to a scratch directory: rewriting the
# committed MATRIX.md would leave the clone dirty, and every later run's report would record the
# plugin commit as "+dirty".
step_matrix() {
    local out
    out=$(mktemp -d)
    tox -e matrix -- reports --include-baselines --out-md "$out/MATRIX.md" \
        --out-html "$out/matrix.html" --site "$out/site"
}

# ruff and strict mypy (a light env without vLLM or torch).
step_lint() {
    tox -e lint
}

# Signature parity with tt-metal: without TT_METAL_HOME it validates the fixture and skips the
# checkout comparison.
step_contract_parity() {
    tox -e contract-parity
}

# The stub must keep matching the real ttnn (the Python 3.12 wheel).
step_stub_parity() {
    local py
    py=$(python_of 3.12)
    if [ -z "$py" ]; then echo "stub-parity needs Python 3.12 (pyenv install 3.12)" >&2; exit 1; fi
    tox -e stub-parity --discover "$py" -- --junitxml="$junit/stub-parity.xml"
}

# The tt-host environment (Python 3.10, the real ttnn, PyPI's torch): built ahead, while the unit
# suite runs, since it is mostly downloading and unpacking. tox's --notest skips commands_pre, so
# the torch pin that commands_pre installs is installed here too (commands_pre then finds it).
step_tt_host_env() {
    local py
    py=$(python_of 3.10)
    if [ -z "$py" ]; then echo "tt-host-env needs Python 3.10 (pyenv install 3.10)" >&2; exit 1; fi
    tox -e tt-host --discover "$py" --notest
    .tox/tt-host/bin/python -m pip install --quiet --disable-pip-version-check --no-deps \
        -r requirements/torch-tt-host.txt
}

# The real ttnn on Python 3.10 (TT hosts' Python) without chips: the install script, the platform
# with the real ttnn, and a chipless `vllm serve` failing fast with one clear error.
step_tt_host() {
    local py
    py=$(python_of 3.10)
    if [ -z "$py" ]; then echo "tt-host needs Python 3.10 (pyenv install 3.10)" >&2; exit 1; fi
    tox -e tt-host --discover "$py" -- --junitxml="$junit/tt-host.xml"
}

# The emulated end-to-end runs: the conformance suite on a live emulated server, gated against the
# committed baseline (one lane, then four lanes).
step_emu() {
    tox -e emu
}

# The CI subset of the mutation suite must be killed by the suite and gate.
step_mutants() {
    tox -e mutants -- --ci
}

# Serve the bundled model, plain/streaming/chat.
step_mutation() {
    tox -e mutation -- --ci
}

step_emu_smoke() {
    tox -e emu-smoke
}

# The real vLLM engine and OpenAI server on the host-emulated mesh.
step_engine() {
    tox -e engine -- --junitxml="$junit/engine.xml"
}

if [ $# -ne 1 ] || ! declare -F "step_${1//-/_}" >/dev/null; then
    echo "usage: bash .ci/steps.sh STEP (one of: $(declare -F | sed -n 's/^declare -f step_//p' | tr '_' '-' | tr '\n' ' '))" >&2
    exit 2
fi
"step_${1//-/_}"
