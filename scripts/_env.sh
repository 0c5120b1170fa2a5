# Shared set-up for scripts/serve and scripts/test: a project venv with this package installed.
# Sourced, not run. Installs what a fresh Debian machine lacks (python3-venv, git, ripgrep) when
# it may (root or sudo); the package itself is installed as a wheel, the way users get it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${HERDR_MCP_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else return 1; fi
}

apt_install() {
    command -v apt-get >/dev/null || return 1
    as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

ensure_venv() {
    if [ ! -x "$VENV/bin/python" ]; then
        if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
            rm -rf "$VENV"
            apt_install python3-venv || { echo "need python3-venv (apt-get install python3-venv)" >&2; exit 1; }
            "$PYTHON" -m venv "$VENV"
        fi
        "$VENV/bin/python" -m pip install -q --upgrade pip
    fi
}

install_package() {  # $1: extras spec such as "" or "[test]"
    "$VENV/bin/python" -m pip install -q "$ROOT$1"
    # Always replace our own package so the venv runs exactly this tree.
    "$VENV/bin/python" -m pip install -q --no-deps --force-reinstall "$ROOT"
}
