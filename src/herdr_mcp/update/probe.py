"""Probe: ask an installed candidate what it is, and hold it to the TARGET contract.

`probe(executable, expected, expected_version, timeout=..., state_schema=...)` runs
`<executable> version --json`
with no stdin and a clean, fixed environment, and checks, in this order:

1. it ran and exited 0 within `timeout` (`probe_failed`, `probe_timeout`);
2. its output is at most `MAX_OUTPUT_BYTES`, one JSON object with exactly the keys `product`,
   `version`, `contract` {`epoch`, `hash`, `tool_count`} and `state_schema`, of the right types,
   no duplicate keys (`probe_output_malformed`);
3. `product` is "herdr-mcp" (`probe_product_mismatch`);
4. `version` is `expected_version` exactly (`probe_version_mismatch`);
5. `contract` equals `expected`, the contract of the admitted manifest M, not the local one
   (`probe_contract_mismatch`, naming both);
6. `state_schema` is the manifest's `state_schema` (`probe_state_schema_mismatch`, naming both):
   a candidate that would open `state.db` at another schema than its release declares is not that
   release (admission judged the declared one). The updater always passes it; None skips this
   step (for a caller that has no manifest).

Returns a `ProbeResult`; every refusal is a `ReleaseDataError` (the candidate the release shipped
is at fault) except `probe_failed` for an executable that cannot be started at all, which is a
`LocalStateError` (the install on this disk is broken).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from herdr_mcp.contract import ContractIdentity, ContractIdentityInvalid, parse_identity
from herdr_mcp.release.manifest import PRODUCT
from herdr_mcp.strict_json import JsonLimits, loads_bounded
from herdr_mcp.update.errors import LocalStateError, ReleaseDataError

#: `version --json` prints about 200 bytes; 64 KiB leaves room for any future field and no more.
MAX_OUTPUT_BYTES = 64 * 1024
#: Its structure (docs/runtime.md "Parse boundaries"): `version --json` is about 20 items.
OUTPUT_LIMITS = JsonLimits(max_bytes=MAX_OUTPUT_BYTES, max_items=1_000)
_KEYS = frozenset({"product", "version", "contract", "state_schema"})


@dataclass(frozen=True)
class ProbeResult:
    """What the candidate said about itself, already checked against what was expected."""

    product: str
    version: str
    contract: ContractIdentity
    state_schema: int


def probe(
    executable: Path,
    expected: ContractIdentity,
    expected_version: str,
    *,
    timeout: float,
    state_schema: int | None = None,
) -> ProbeResult:
    """Run `<executable> version --json` and check it (module docstring). Raises `ReleaseDataError`
    or `LocalStateError` with the codes listed there."""
    # 1. Run it, 2. parse strictly.
    result = ask_version(executable, timeout=timeout)
    # 3. Product, 4. version, 5. the TARGET contract, 6. the declared state schema.
    if result.product != PRODUCT:
        raise ReleaseDataError(
            "probe_product_mismatch", f"the candidate says it is {result.product!r}, not {PRODUCT!r}"
        )
    if result.version != expected_version:
        raise ReleaseDataError(
            "probe_version_mismatch",
            f"the candidate says it is version {result.version}, the release is {expected_version}",
        )
    if result.contract != expected:
        raise ReleaseDataError(
            "probe_contract_mismatch",
            f"the candidate serves contract {_describe(result.contract)}, the release declares "
            f"{_describe(expected)}; it is not installed as this release",
        )
    # 6. The state schema the manifest declares.
    if state_schema is not None and result.state_schema != state_schema:
        raise ReleaseDataError(
            "probe_state_schema_mismatch",
            f"the candidate reports state schema {result.state_schema}, the release declares "
            f"{state_schema}; it is not installed as this release",
        )
    return result


def ask_version(executable: Path, *, timeout: float) -> ProbeResult:
    """What `<executable> version --json` says (steps 1 and 2 of the module docstring), with no
    expectation: the probe of a candidate, and how the updater and `dev sync` learn what an
    installed generation is. Raises `probe_timeout`, `probe_failed`, `probe_output_malformed`."""
    try:
        completed = subprocess.run(
            [str(executable), "version", "--json"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            env=_clean_env(),
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ReleaseDataError(
            "probe_timeout", f"{executable} version --json did not answer within {timeout} s"
        ) from None
    except OSError as exc:
        raise LocalStateError("probe_failed", f"cannot run {executable}: {exc}") from None
    if completed.returncode != 0:
        tail = completed.stderr.decode("utf-8", "replace").strip()[-2000:]
        raise ReleaseDataError(
            "probe_failed", f"{executable} version --json exited {completed.returncode}: {tail}"
        )
    return parse_version_output(completed.stdout)


def parse_version_output(data: bytes) -> ProbeResult:
    """The one parse boundary for `version --json` output. Raises
    `ReleaseDataError("probe_output_malformed")`."""
    if len(data) > MAX_OUTPUT_BYTES:
        raise _malformed(f"{len(data)} bytes of output, more than {MAX_OUTPUT_BYTES}")
    try:
        document = loads_bounded(data, OUTPUT_LIMITS)
    except ValueError as exc:  # not UTF-8, not JSON, or past the bounds (its code in the text)
        raise _malformed(f"not JSON within bounds ({exc})") from None
    _check_keys(document, _KEYS, "the output")
    try:
        contract = parse_identity(document["contract"], "contract")
    except ContractIdentityInvalid as exc:
        raise _malformed(str(exc)) from None
    product, version = document["product"], document["version"]
    state_schema = document["state_schema"]
    if not (isinstance(product, str) and isinstance(version, str)):
        raise _malformed("product and version must be strings")
    if not _is_int(state_schema):
        raise _malformed("state_schema must be an integer")
    return ProbeResult(product=product, version=version, contract=contract, state_schema=state_schema)


def _check_keys(value: Any, keys: frozenset[str], where: str) -> None:
    if not isinstance(value, dict):
        raise _malformed(f"{where} is not a JSON object")
    if set(value) != keys:
        raise _malformed(f"{where} has keys {sorted(value)}, expected {sorted(keys)}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _clean_env() -> dict[str, str]:
    """Only what a Python console script needs: no PYTHON* variables that could redirect imports."""
    env = {key: os.environ[key] for key in ("PATH", "LANG", "LC_ALL", "TMPDIR") if key in os.environ}
    env["HOME"] = os.environ.get("HOME", "/nonexistent")
    return env


def _describe(identity: ContractIdentity) -> str:
    return f"epoch {identity.epoch} ({identity.tool_count} tools, {identity.hash})"


def _malformed(message: str) -> ReleaseDataError:
    return ReleaseDataError("probe_output_malformed", f"`version --json` output: {message}")
