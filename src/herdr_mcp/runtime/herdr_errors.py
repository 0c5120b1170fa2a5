"""How a Herdr failure is told to the remote planner.

Herdr's own error codes (pane_not_found, agent_blocked, ...) pass through unchanged. Transport
failures are split by what they mean for a mutation: a request that was never sent delivered
nothing, while a timeout or a torn answer after sending leaves the outcome unknown, so the
planner is told to re-inspect instead of retrying (`delivery_unknown`, the code the link and the
Edge use for it too; `delivery_uncertain` before issue 23).
"""

from __future__ import annotations

from herdr_mcp.errors import DELIVERY_UNKNOWN, ToolError
from herdr_mcp.herdr import HerdrError, HerdrRemoteError, HerdrUnavailable


def tool_error_from_herdr(exc: HerdrError, *, mutating: bool) -> ToolError:
    if isinstance(exc, HerdrRemoteError):
        return ToolError(exc.code, exc.message, method=exc.method)
    if mutating and exc.request_sent:
        return ToolError(
            DELIVERY_UNKNOWN,
            f"the request reached Herdr but its answer was lost ({exc.code}: {exc.message}); it may "
            "have taken effect: re-inspect before repeating it",
            delivery="unknown",
            method=exc.method,
        )
    if isinstance(exc, HerdrUnavailable):
        return ToolError(
            "herdr_unavailable",
            f"Herdr is not answering on its socket ({exc.message}); start Herdr (or `herdr-mcp serve "
            "--sim`) and retry; nothing was sent",
            delivery="not_delivered",
        )
    return ToolError(exc.code, exc.message, method=exc.method)
