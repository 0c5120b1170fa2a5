"""The HTTP edges the browser plane's endpoints share: JSON bodies in, `{"error": {"code",
"message"}}` out, with an HTTP status chosen from the error code (docs/browser-protocol.md 2).

Statuses: 400 for a bad request (`invalid_argument`, `invalid_json`, `json_too_deep`,
`json_too_many_items`, and the continuity journal's refusals of its params), 401
`unauthorized`, 404 for `*_not_found` and `unknown_method`, 405 `method_not_allowed`, 409 for
`*_conflict` (and `target_changed`, `pane_has_agent`, `workspace_working`), 413 `body_too_large`, 415
`unsupported_media_type`, 503 for what the workstation lacks right now (`herdr_unavailable`,
`state_unavailable`, `continuity_journal_unavailable`, `audit_unavailable`), 500 `internal_error`.
"""

from __future__ import annotations

import math
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from herdr_mcp.errors import HerdrMcpError, LocalFault, ToolError
from herdr_mcp.strict_json import JsonLimitExceeded, JsonLimits, loads_bounded
from herdr_mcp.text import clean_json, dumps

#: Request bodies at most this long (the native host's frames are under 1 MiB too).
MAX_BODY_BYTES = 1024 * 1024
#: What a body may hold (docs/runtime.md "Parse boundaries"): a request is a few ids and at most
#: one handoff or checkpoint document.
BODY_LIMITS = JsonLimits(max_bytes=MAX_BODY_BYTES, max_items=50_000)

_STATUS = {
    "unauthorized": 401,
    "unknown_method": 404,
    "method_not_allowed": 405,
    "body_too_large": 413,
    "unsupported_media_type": 415,
    "internal_error": 500,
    "herdr_unavailable": 503,
    "state_unavailable": 503,
    "continuity_journal_unavailable": 503,
    "audit_unavailable": 503,
    "target_changed": 409,
    "pane_has_agent": 409,
    "workspace_working": 409,
}


def status_for(error: HerdrMcpError) -> int:
    code = error.code
    if code in _STATUS:
        return _STATUS[code]
    if code.endswith("_not_found"):
        return 404
    if code.endswith("_conflict"):
        return 409
    if isinstance(error, LocalFault):
        return 503
    return 400


class TextSafeJSONResponse(JSONResponse):
    """A JSON answer whose body always encodes: a lone surrogate anywhere in it leaves as U+FFFD,
    a byte a file name kept (surrogateescape) as `\\xNN` (`herdr_mcp.text.dumps`; docs/runtime.md
    "Text"). Every JSON answer of /browser/*, /push/* and /health is one."""

    def render(self, content: Any) -> bytes:
        return dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


def json_response(content: Any, status_code: int = 200) -> JSONResponse:
    """`content` as a JSON answer (see `TextSafeJSONResponse`)."""
    return TextSafeJSONResponse(content, status_code=status_code)


def error_response(error: HerdrMcpError) -> JSONResponse:
    body: dict[str, Any] = {"code": error.code, "message": error.message}
    if isinstance(error, ToolError):
        body.update({key: value for key, value in error.details.items() if key not in body})
    return json_response({"error": body}, status_code=status_for(error))


def _finite(value: str) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError("numbers must be finite")
    return number


async def read_json_object(request: Request) -> dict[str, Any]:
    """The request's body as a JSON object (`{}` when empty); ToolError `body_too_large`,
    `json_too_deep`, `json_too_many_items` (`BODY_LIMITS`), `unsupported_media_type`,
    `invalid_json` otherwise.

    Every lone surrogate the JSON spells (`"\\ud800"`) becomes U+FFFD (docs/runtime.md "Text"):
    nothing that cannot be encoded reaches the state, Herdr or an answer."""
    content_type = request.headers.get("content-type")
    if content_type is not None and not content_type.lower().startswith("application/json"):
        raise ToolError("unsupported_media_type", "send the body as application/json")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ToolError("body_too_large", f"the body is larger than {MAX_BODY_BYTES} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ToolError("body_too_large", f"the body is larger than {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        return {}
    try:
        value = loads_bounded(raw, BODY_LIMITS, parse_float=_finite)
    except JsonLimitExceeded as exc:
        raise ToolError(exc.code, exc.message, limit=exc.limit) from None
    except ValueError as exc:
        raise ToolError("invalid_json", f"the body is not one JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise ToolError("invalid_json", "the body must be a JSON object")
    cleaned: dict[str, Any] = clean_json(value)
    return cleaned
