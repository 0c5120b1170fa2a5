"""The tool dispatcher: one tools/call answered the same way over every transport.

Arguments are parsed once, before a handler runs (`runtime.tools.arguments`: bounded, validated
against the catalog's own JSON schema, its defaults filled); a handler returns a dict (the
structured result) or an `ImageResult`, or raises `ToolError`; every call is recorded in the
audit log before its answer leaves. Nothing here imports the `mcp` SDK: the HTTP app wraps the
dispatcher in the SDK's server (`runtime.server`), the stdio loop (`runtime.stdio`) sends its
plain JSON answers as they are.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from herdr_mcp import __version__
from herdr_mcp.contract import CURRENT_EPOCH, load_catalog
from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.audit import AuditLog, AuditUnavailable, describe_call
from herdr_mcp.runtime.identity import INSTRUCTIONS as INSTRUCTIONS  # re-exported: runtime.server
from herdr_mcp.runtime.services import Services
from herdr_mcp.runtime.tools import HANDLERS
from herdr_mcp.runtime.tools.agents import CALL_SCOPE, SCOPE_META_KEY
from herdr_mcp.runtime.tools.arguments import ToolArguments, check_limits
from herdr_mcp.runtime.tools.fs.image import ImageResult
from herdr_mcp.text import clean_json, safe_json

log = logging.getLogger(__name__)


class ToolDispatcher:
    """Parses arguments once (bounds, the frozen schemas, their defaults), runs the matching
    handler and records every call in the audit log (`audit`; by default `audit.jsonl` in the
    config dir)."""

    def __init__(self, services: Services, epoch: int = CURRENT_EPOCH, audit: AuditLog | None = None) -> None:
        self.services = services
        self.audit = audit if audit is not None else AuditLog(services.config.config_dir)
        self.catalog = load_catalog(epoch)
        missing = {tool["name"] for tool in self.catalog} - set(HANDLERS)
        if missing:
            raise RuntimeError(f"catalog tools without a handler: {sorted(missing)}")
        self.arguments = ToolArguments(self.catalog)
        self.input_schemas: dict[str, Mapping[str, Any]] = self.arguments.schemas

    async def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        session: str | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Answer one tools/call with the result object as it goes on the wire (`content`,
        `structuredContent`, `isError`, `resultType`; plain JSON, so the stdio loop sends it as it
        is and the SDK server validates it once); the answer leaves only after its audit record
        is written.
        `meta` is the request's `_meta`: its `herdr-mcp/scope` (the browser session scope a
        herdr_prompt's outcome wakes, docs/browser-protocol.md 2) is handed to the handler."""
        # Bounds first (docs/runtime.md "Tool arguments"): arguments past them are not read
        # further, not even for the audit record's digest.
        received = dict(arguments or {})
        try:
            check_limits(received)
        except ToolError as exc:
            refused: ToolError | None = exc
            given: dict[str, Any] = {}
        else:
            refused = None
            # Text rule (docs/runtime.md "Text"): a lone surrogate in the arguments is U+FFFD from here on.
            given = clean_json(received)
        CALL_SCOPE.set(None if meta is None else meta.get(SCOPE_META_KEY))
        started, clock = dt.datetime.now(dt.UTC), time.perf_counter()

        def record(outcome: str) -> dict[str, Any]:
            entry = describe_call(
                tool=name,
                arguments=given,
                session=session,
                runtime=self.services.runtime_instance,
                version=__version__,
                started=started,
                outcome=outcome,
                duration_ms=(time.perf_counter() - clock) * 1000,
                known_secrets=self.audit.known_secrets.values(),
            )
            if refused is not None:
                entry["args_sha256"] = None  # the arguments were refused unread
            return entry

        # Only cancellation (the client went away) leaves _answer without an outcome.
        outcome = "cancelled"
        try:
            result, outcome = await self._answer(name, given, refused)
        finally:
            try:
                self.audit.append(record(outcome))
            except AuditUnavailable as exc:
                # The call has run: withholding its answer would invite a blind retry of a
                # mutation. Later calls are refused before they run until the log is writable.
                log.error("%s answered without an audit record: %s", name, exc)
        return result

    async def _answer(
        self, name: str, arguments: dict[str, Any], refused: ToolError | None
    ) -> tuple[dict[str, Any], str]:
        """The call's result and its outcome code (`ok` or the error code); `refused` is the
        bounds' refusal of the arguments, if any."""
        try:
            if not self.audit.healthy:
                raise ToolError(
                    "audit_unavailable",
                    f"nothing was run: the runtime cannot write its audit log ({self.audit.last_error}); "
                    f"free disk space or fix the permissions of {self.audit.directory}, then retry",
                )
            if refused is not None:
                raise refused
            output = await self._run(name, arguments)
        except ToolError as exc:
            return _error_result(exc), exc.code
        except Exception:
            log.exception("tool %s failed unexpectedly", name)
            failure = ToolError("internal_error", f"{name} failed inside the runtime; see the runtime log")
            return _error_result(failure), failure.code
        return _ok_result(output), "ok"

    async def _run(self, name: str, arguments: dict[str, Any]) -> dict[str, Any] | ImageResult:
        prepared = self.arguments.prepare(name, arguments)  # unknown_tool before a handler is looked up
        return await HANDLERS[name](self.services, prepared)


def _ok_result(output: dict[str, Any] | ImageResult) -> dict[str, Any]:
    # Text rule: whatever a tool returned, its answer encodes (a byte a name kept is `\xNN`, any
    # other lone surrogate U+FFFD); the SDK's serializer would otherwise fail on it.
    if isinstance(output, ImageResult):
        encoded = base64.b64encode(output.data).decode("ascii")
        info = safe_json(dict(output.info))
        return _result(
            [
                {"type": "image", "data": encoded, "mimeType": output.mime_type},
                {"type": "text", "text": _json(info)},
            ],
            info,
            is_error=False,
        )
    text = _json(output)
    if text.isascii() or _encodes(text):
        # Nothing to make safe (what `safe_json` would answer, as the same object): the text
        # is made once and the answer not walked.
        return _result([{"type": "text", "text": text}], output, is_error=False)
    structured = safe_json(output)
    return _result([{"type": "text", "text": _json(structured)}], structured, is_error=False)


def _encodes(text: str) -> bool:
    """Whether `text` encodes as UTF-8: JSON dumped with `ensure_ascii=False` holds a lone
    surrogate of the value as itself, so this is "no string of the value holds one"."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _result(content: list[dict[str, Any]], structured: dict[str, Any], *, is_error: bool) -> dict[str, Any]:
    # The shape and key order of the SDK's CallToolResult dumped by alias without None fields.
    return {
        "content": content,
        "structuredContent": structured,
        "isError": is_error,
        "resultType": "complete",
    }


#: `json.dumps(value, ensure_ascii=False, separators=(",", ":"))` without building an encoder
#: for each answer.
_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _error_result(exc: ToolError) -> dict[str, Any]:
    payload = safe_json({"error": exc.to_dict()})
    return _result([{"type": "text", "text": _json(payload)}], payload, is_error=True)
