"""Which native methods the connected Herdr has, and what herdr_call may do with each.

The surface is discovered, not assumed (seed 004: discover the live schema, then a validated
passthrough). For the Herdr that answers `ping`:

1. When a `herdr` CLI is on PATH and `herdr api schema --json` prints a schema whose `protocol`
   equals the one `ping` reported, that schema is the surface (the CLI prints the schema compiled
   into it, so it describes the running server only when both speak the same protocol).
2. Else the built-in reference for that protocol (`herdr_mcp.herdr.reference`, taken from Herdr's
   published schemas), and for a protocol with no reference the nearest lower one, with a warning.

Classes come from the built-in reference (a method it does not know is `unclassified`). What
herdr_call does with each class (docs/runtime.md, "Herdr's native methods"):

- read: passed through.
- mutating and client_ui: passed through, refused in read-only mode (`read_only_mode`).
- streaming: the bounded waits (`agent.wait`, `events.wait`, `pane.wait_for_output`) need a
  `timeout_ms` of at most 10 minutes (`unbounded_wait` otherwise); `events.subscribe` and
  `pane.graphics.stream` hold a connection open forever and are refused (`streaming_method_refused`).
- server_control, install, unclassified: refused (`native_method_refused`) unless allowed by
  `--allow-herdr-class CLASS` (then treated as mutating).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from herdr_mcp.errors import ToolError
from herdr_mcp.herdr import HerdrClient, HerdrError
from herdr_mcp.herdr.reference import (
    SUPPORTED_PROTOCOLS,
    MethodReference,
    ProtocolReference,
    from_schema_document,
    nearest,
)
from herdr_mcp.strict_json import JsonLimits, loads_bounded

log = logging.getLogger(__name__)

#: Every Herdr method the runtime sends on its own (not through herdr_call); each is in the
#: reference of every supported protocol (tests/herdr/test_herdr_client.py).
RUNTIME_METHODS = frozenset(
    {
        "ping",
        "session.snapshot",
        "workspace.list",
        "tab.list",
        "pane.list",
        "pane.get",
        "pane.read",
        "pane.send_input",
        "agent.list",
        "agent.get",
        "agent.prompt",
        "events.subscribe",
    }
)
#: The classes herdr_call refuses unless a setting allows them.
GUARDED_CLASSES = ("server_control", "install", "unclassified")
#: Streaming methods herdr_call runs when bounded, and the longest bound it accepts.
BOUNDED_WAITS = frozenset({"agent.wait", "events.wait", "pane.wait_for_output"})
MAX_WAIT_MS = 600_000
#: The classes whose methods change Herdr or what its user sees (refused in read-only mode).
CHANGING_CLASSES = frozenset({"mutating", "client_ui", "server_control", "install", "unclassified"})
#: How long one discovery is reused before Herdr is asked again.
SURFACE_TTL_SECONDS = 10.0
#: `herdr api schema --json`: how long it may take, and how much it may print.
SCHEMA_COMMAND_TIMEOUT_SECONDS = 10.0
SCHEMA_MAX_BYTES = 16 * 1024 * 1024
#: Its structure (docs/runtime.md "Parse boundaries"): protocol 22's schema holds ~13,000 items.
SCHEMA_LIMITS = JsonLimits(max_bytes=SCHEMA_MAX_BYTES, max_items=1_000_000)
#: The protocol described when Herdr does not answer at all.
FALLBACK_PROTOCOL = max(SUPPORTED_PROTOCOLS)


@dataclass(frozen=True)
class Surface:
    """The native methods of the connected Herdr, with where their description came from."""

    reference: ProtocolReference
    herdr_version: str | None
    protocol: int | None
    source: str
    warnings: tuple[str, ...]

    def describe(self) -> dict[str, Any]:
        return {
            "version": self.herdr_version,
            "protocol": self.protocol,
            "schema_source": self.source,
            "reference_protocol": self.reference.protocol,
            "supported": self.protocol in SUPPORTED_PROTOCOLS,
            "warnings": list(self.warnings),
        }


def unsupported_warning(version: str | None, protocol: int, used: int) -> str:
    return (
        f"Herdr {version or '?'} speaks protocol {protocol}, for which herdr-mcp has no reference "
        f"(it supports {', '.join(map(str, SUPPORTED_PROTOCOLS))}); methods are described by "
        f"protocol {used}'s reference, so methods added since are missing and changed ones may be "
        "misdescribed. Update herdr-mcp."
    )


def protocol_support(version: object, protocol: object) -> dict[str, Any]:
    """`supported` and, when not, a `warning` for a Herdr that reported `protocol` in ping."""
    if isinstance(protocol, int) and not isinstance(protocol, bool) and protocol in SUPPORTED_PROTOCOLS:
        return {"supported": True}
    if not isinstance(protocol, int) or isinstance(protocol, bool):
        return {
            "supported": False,
            "warning": "Herdr's ping named no protocol number; herdr-mcp cannot tell "
            "which of its methods and behaviours apply.",
        }
    used = nearest(protocol)[0].protocol
    return {
        "supported": False,
        "warning": unsupported_warning(version if isinstance(version, str) else None, protocol, used),
    }


class NativeMethods:
    """Discovers the connected Herdr's surface (cached for SURFACE_TTL_SECONDS)."""

    def __init__(
        self,
        herdr: HerdrClient,
        *,
        allowed_classes: frozenset[str] = frozenset(),
        clock: Any = time.monotonic,
    ) -> None:
        self._herdr = herdr
        self.allowed_classes = allowed_classes
        self._clock = clock
        self._cached: tuple[float, Surface] | None = None
        self._lock = asyncio.Lock()
        self._warned: set[str] = set()

    async def surface(self) -> Surface:
        async with self._lock:
            now = self._clock()
            if self._cached is not None and now - self._cached[0] < SURFACE_TTL_SECONDS:
                return self._cached[1]
            found = await self._discover()
            self._cached = (now, found)
            for warning in found.warnings:
                if warning not in self._warned:
                    self._warned.add(warning)
                    log.warning("%s", warning)
            return found

    async def _discover(self) -> Surface:
        try:
            pong = await self._herdr.call("ping", {}, timeout=2.0)
        except HerdrError as exc:
            reference, _exact = nearest(FALLBACK_PROTOCOL)
            return Surface(
                reference,
                None,
                None,
                f"built-in reference, protocol {reference.protocol}",
                (
                    f"Herdr is not answering ({exc.code}); the methods shown are protocol "
                    f"{reference.protocol}'s and may differ from the Herdr that starts later.",
                ),
            )
        raw_protocol, raw_version = pong.get("protocol"), pong.get("version")
        protocol = (
            raw_protocol if isinstance(raw_protocol, int) and not isinstance(raw_protocol, bool) else None
        )
        version = raw_version if isinstance(raw_version, str) else None
        warnings: list[str] = []
        if protocol is None:
            reference, exact = nearest(FALLBACK_PROTOCOL)
            warnings.append(
                f"Herdr's ping named no protocol; using protocol {reference.protocol}'s reference."
            )
        else:
            reference, exact = nearest(protocol)
            if not exact:
                warnings.append(unsupported_warning(version, protocol, reference.protocol))
        live, note = await _cli_schema(protocol, reference)
        if note:
            warnings.append(note)
        if live is not None:
            return Surface(live, version, protocol, live.origin, tuple(warnings))
        source = f"built-in reference, protocol {reference.protocol} ({reference.origin})"
        return Surface(reference, version, protocol, source, tuple(warnings))

    # -- herdr_call's rules --------------------------------------------------------------------

    def refusal(
        self, method: MethodReference, params: Mapping[str, Any], *, read_only: bool
    ) -> ToolError | None:
        """Why herdr_call must not send `method` with `params`, or None."""
        refused = self.class_refusal(method, read_only=read_only)
        if refused is not None or method.name not in BOUNDED_WAITS:
            return refused
        bound = params.get("timeout_ms")
        if not isinstance(bound, int) or isinstance(bound, bool) or not 0 < bound <= MAX_WAIT_MS:
            return ToolError(
                "unbounded_wait",
                f"{method.name} needs a timeout_ms between 1 and {MAX_WAIT_MS} through herdr_call "
                "(without one Herdr would wait for ever)",
                method=method.name,
            )
        return None

    def class_refusal(self, method: MethodReference, *, read_only: bool) -> ToolError | None:
        """Why herdr_call refuses `method` whatever its params (its class, read-only mode), or None."""
        name, klass = method.name, method.method_class
        if klass in GUARDED_CLASSES and klass not in self.allowed_classes:
            return ToolError(
                "native_method_refused",
                f"{name} is a {klass} method (it controls or changes the Herdr installation itself); "
                f"herdr_call refuses it unless the runtime runs with --allow-herdr-class {klass}",
                method=name,
                method_class=klass,
            )
        if klass == "streaming" and name not in BOUNDED_WAITS:
            return ToolError(
                "streaming_method_refused",
                f"{name} keeps its connection open and streams; herdr_call answers once. Use "
                "events.wait or pane.wait_for_output with a timeout_ms, or herdr_since for events",
                method=name,
            )
        if read_only and klass in CHANGING_CLASSES:
            return ToolError(
                "read_only_mode", f"{name} changes Herdr state and the runtime is read-only", method=name
            )
        return None


async def _cli_schema(
    protocol: int | None, reference: ProtocolReference
) -> tuple[ProtocolReference | None, str]:
    """The schema `herdr api schema --json` prints, when it describes `protocol`; else None and
    a note saying why it was not used ("" when there is no herdr CLI at all)."""
    executable = shutil.which("herdr", path=os.environ.get("PATH"))
    if executable is None:
        return None, ""
    try:
        process = await asyncio.create_subprocess_exec(
            executable,
            "api",
            "schema",
            "--json",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
    except OSError as exc:
        return None, f"{executable} could not be run ({exc.strerror or exc}); using the built-in reference."
    try:
        async with asyncio.timeout(SCHEMA_COMMAND_TIMEOUT_SECONDS):
            assert process.stdout is not None
            output = b""
            while len(output) <= SCHEMA_MAX_BYTES and (chunk := await process.stdout.read(1 << 20)):
                output += chunk
            if len(output) > SCHEMA_MAX_BYTES:
                process.kill()
            status = await process.wait()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        return None, f"`{executable} api schema --json` did not finish in time; using the built-in reference."
    if status != 0 or len(output) > SCHEMA_MAX_BYTES:
        return None, f"`{executable} api schema --json` failed (exit {status}); using the built-in reference."
    try:
        document = loads_bounded(output, SCHEMA_LIMITS, strict=False)
    except ValueError as exc:  # not JSON, or past the bounds
        return (
            None,
            f"`{executable} api schema --json` printed no JSON within bounds ({exc}); "
            "using the built-in reference.",
        )
    printed = document.get("protocol") if isinstance(document, dict) else None
    if printed != protocol:
        return None, (
            f"{executable} prints the schema of protocol {printed!r} but the running Herdr speaks "
            f"protocol {protocol}: the CLI on PATH is not the running server's; its schema is ignored "
            "and the built-in reference is used."
        )
    try:
        live = from_schema_document(
            document, classes_from=reference, origin=f"{executable} api schema --json (protocol {printed})"
        )
    except ValueError as exc:
        return None, f"`{executable} api schema --json` printed a schema herdr-mcp cannot read ({exc})."
    return live, ""
