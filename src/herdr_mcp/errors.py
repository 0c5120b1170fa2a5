"""The one error type a tool call can raise, with its stable code.

Every refusal the runtime gives a remote planner is a `ToolError`: a stable machine code
(`path_outside_root`, `operational_root_mutation_unsupported`, ...) plus one sentence that says
what to do next. The MCP layer turns it into an `isError` result whose structured content is
`{"error": {"code", "message", ...details}}`; nothing else about the failure leaks.
"""

from __future__ import annotations

from typing import Any


class ToolError(Exception):
    """A refusal or failure with a stable `code` and an actionable `message`."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        """The wire form: `{"code", "message", **details}`."""
        return {"code": self.code, "message": self.message, **self.details}
