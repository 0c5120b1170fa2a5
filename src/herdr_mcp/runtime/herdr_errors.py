"""How a Herdr failure is told to the remote planner.

Herdr's own error codes (pane_not_found, agent_blocked, ...) pass through unchanged. Transport
failures are split by what they mean for a mutation: a connection that never opened delivered
nothing, while a timeout or a torn answer after sending leaves the outcome unknown, so the
planner is told to re-inspect instead of retrying.
"""

from __future__ import annotations

from herdr_mcp.errors import ToolError
from herdr_mcp.herdr import HerdrError, HerdrProtocolError, HerdrTimeout, HerdrUnavailable


def tool_error_from_herdr(exc: HerdrError, *, mutating: bool) -> ToolError:
    if isinstance(exc, HerdrUnavailable):
        return ToolError(
            "herdr_unavailable",
            f"Herdr is not answering on its socket ({exc}); start Herdr (or `herdr-mcp serve --sim`) "
            "and retry; nothing was sent",
            delivery="not_delivered",
        )
    if isinstance(exc, HerdrTimeout | HerdrProtocolError) and mutating:
        return ToolError(
            "delivery_uncertain",
            f"the request reached Herdr but its answer was lost ({exc.code}); it may have taken "
            "effect: re-inspect before repeating it",
            delivery="unknown",
        )
    return ToolError(exc.code, str(exc))
