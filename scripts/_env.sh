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

# What the installed package was built from: every file the wheel takes (and pyproject.toml, which
# also names the dependencies), by name and content. Symbolic links are not followed: the ones in
# src/ point into manifests/ and attestations/, which are hashed themselves.
source_digest() {
    (cd "$ROOT" && find src manifests attestations pyproject.toml README.md LICENSE -type f \
        ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) |
        sha256sum | cut -d' ' -f1
}

# The RECORD of the installed herdr_mcp: it changes with every install, so an install by other
# means (pip install -e, another tree) no longer matches the stamp.
installed_record_digest() {
    local records=("$VENV"/lib/python*/site-packages/herdr_mcp-*.dist-info/RECORD)
    [ ${#records[@]} = 1 ] && [ -f "${records[0]}" ] && sha256sum "${records[0]}" | cut -d' ' -f1
}

install_package() {  # $1: extras spec such as "" or "[test]"
    # Installing takes seconds (a wheel is built); skip it when the venv already runs exactly this
    # tree with these extras: the stamp holds the source digest and the RECORD it was installed as.
    local stamp="$VENV/.herdr-mcp-installed${1:+-${1//[^a-z]/}}" wanted record
    wanted="$(source_digest)"
    record="$(installed_record_digest || true)"
    if [ -n "$record" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$wanted $record" ]; then
        return 0
    fi
    "$VENV/bin/python" -m pip install -q "$ROOT$1"
    # Always replace our own package so the venv runs exactly this tree.
    "$VENV/bin/python" -m pip install -q --no-deps --force-reinstall "$ROOT"
    record="$(installed_record_digest)"
    echo "$wanted $record" > "$stamp"
}
