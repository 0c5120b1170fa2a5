"""Where a herdr-mcp executable comes from: a generation's own venv, a checkout, or elsewhere.

The services and `herdr-mcp start` ask this before they run an executable for good:

- `generation`: the executable lies in the runtime dir of a registered generation
  (`<config dir>/runtimes/<id>/venv`, made by `update` or `dev sync`/`start`). Its `plane` is
  the one its provenance records: `prod` for a generation the updater installed from a signed
  release (`"source": "release"`, `update/apply.py`), `dev` for one built from a checkout.
- `checkout`: the executable's venv holds herdr_mcp installed from a local directory that is a
  Git checkout of herdr-mcp (PEP 610 `direct_url.json` with a `file://` URL and `dir_info`: what
  `pip install <dir>` writes, as `./scripts/serve` does into `<checkout>/.venv`, and `pip install
  -e`), or the venv itself sits in such a checkout. `./scripts/serve` reinstalls that venv in
  place whenever the tree changes, so nothing long-lived may run from it.
- `other`: anything else (pipx or uv from Git, a wheel from an index): no release signed it,
  and no checkout to build is known.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit

from herdr_mcp.generations.control import GenerationStore
from herdr_mcp.generations.process import in_runtime_dir
from herdr_mcp.layout import Layout
from herdr_mcp.strict_json import JsonLimits, loads_bounded

OriginKind = Literal["generation", "checkout", "other"]
#: A direct_url.json is a few hundred bytes.
_MAX_DIRECT_URL_BYTES = 64 * 1024
_DIRECT_URL_LIMITS = JsonLimits(max_bytes=_MAX_DIRECT_URL_BYTES, max_items=1_000)
_PLANES = {"prod": "a PROD generation (a signed release)", "dev": "a DEV generation (a checkout build)"}


@dataclass(frozen=True)
class InstallOrigin:
    kind: OriginKind
    executable: Path
    #: A sentence saying where it comes from.
    detail: str
    generation: str | None = None
    #: `prod` or `dev` for a generation whose provenance records it, else None.
    plane: str | None = None
    checkout: Path | None = None


def install_origin(config_dir: Path, executable: Path) -> InstallOrigin:
    """Classify `executable` (module docstring). Reads the control file of `config_dir`'s
    generations (raising its `GenerationError`s when it is unreadable) and the venv's metadata."""
    real = Path(os.path.realpath(executable))
    store = GenerationStore.in_dir(Layout(config_dir).generations_dir)
    for spec in store.read_control().generations:
        if any(in_runtime_dir(config_dir, spec.generation, path) for path in (executable, real)):
            provenance = spec.provenance or {}
            plane = provenance.get("plane")
            if plane is None and provenance.get("source") == "release":
                plane = "prod"
            what = _PLANES.get(plane or "", "a generation of unknown provenance")
            return InstallOrigin(
                "generation",
                executable,
                f"generation {spec.generation}, {what}",
                spec.generation,
                plane if plane in _PLANES else None,
            )
    venv = real.parent.parent
    source = _installed_from_dir(venv)
    for candidate in (source, venv.parent):
        if candidate is not None and _is_checkout(candidate):
            detail = f"installed from the checkout {candidate} into {venv}"
            return InstallOrigin("checkout", executable, detail, checkout=candidate)
    return InstallOrigin("other", executable, _other_detail(venv))


def _direct_url(venv: Path) -> dict[str, object] | None:
    found = sorted(venv.glob("lib/python*/site-packages/herdr_mcp-*.dist-info/direct_url.json"))
    if len(found) != 1:
        return None
    try:
        with found[0].open("rb") as handle:
            document = loads_bounded(handle.read(_MAX_DIRECT_URL_BYTES + 1), _DIRECT_URL_LIMITS, strict=False)
    except (OSError, ValueError):  # unreadable, not JSON, or past the bounds: no origin known
        return None
    return document if isinstance(document, dict) else None


def _installed_from_dir(venv: Path) -> Path | None:
    """The local directory herdr_mcp was installed from into `venv`, if PEP 610 says so."""
    document = _direct_url(venv)
    if document is None or "dir_info" not in document or not isinstance(document.get("url"), str):
        return None
    parts = urlsplit(str(document["url"]))
    if parts.scheme != "file":
        return None
    return Path(unquote(parts.path))


def _is_checkout(path: Path) -> bool:
    """A Git checkout of herdr-mcp: `.git` and a pyproject.toml naming the project."""
    try:
        pyproject = (path / "pyproject.toml").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return (path / ".git").exists() and 'name = "herdr-mcp"' in pyproject


def _other_detail(venv: Path) -> str:
    document = _direct_url(venv)
    if document is not None and "vcs_info" in document:
        return f"installed from Git ({document.get('url')}) into {venv}, not from a signed release"
    if document is not None:
        return f"installed from {document.get('url')} into {venv}, not from a signed release"
    return f"installed into {venv} from a wheel or an index, not from a signed release"
