"""Errors of the Herdr socket client, split by who is at fault.

- `HerdrUnavailable`: we could not reach Herdr at all (no socket, refused, permission).
- `HerdrTimeout`: Herdr was reached but did not answer in time.
- `HerdrProtocolError`: Herdr (or whatever owns the socket) answered something that is not
  the Herdr protocol: invalid JSON, a foreign id, no result/error, a line over the size cap.
- `HerdrRemoteError`: Herdr understood the request and refused it; `.code` is Herdr's own code
  (`pane_not_found`, `agent_not_found`, `invalid_params`, `timeout`, `agent_blocked`, ...).
- `HerdrRequestTooLarge`: the caller built a request Herdr would reject for its size; nothing
  was sent.

Every error has a stable `.code` and a `.message` that says what to do. `request_sent` tells
whether the whole request reached the socket before the failure: when it is true and the method
mutates, the mutation may have happened, so re-inspect before retrying.
"""

from __future__ import annotations

from typing import Any

from herdr_mcp.errors import LocalFault


class HerdrError(LocalFault):
    """Base of every Herdr client error: a stable `code` and an actionable `message`."""

    code: str = "herdr_error"

    def __init__(self, message: str, *, method: str | None = None, request_sent: bool = False) -> None:
        super().__init__(self.code, message)
        self.method = method
        self.request_sent = request_sent

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        """The wire form used in tool errors: `{"code", "message", "method"?, "request_sent"}`."""
        body: dict[str, Any] = {"code": self.code, "message": self.message, "request_sent": self.request_sent}
        if self.method is not None:
            body["method"] = self.method
        return body


class HerdrUnavailable(HerdrError):
    """The Herdr socket could not be reached (missing, refused, permission denied, closed)."""

    code = "herdr_unavailable"


class HerdrTimeout(HerdrError):
    """Herdr did not answer within the call's time budget."""

    code = "herdr_timeout"


class HerdrProtocolError(HerdrError):
    """The peer's answer is not valid Herdr protocol."""

    code = "herdr_protocol_error"


class HerdrRequestTooLarge(HerdrError):
    """The encoded request exceeds Herdr's line limit; it was not sent."""

    code = "herdr_request_too_large"


class HerdrRemoteError(HerdrError):
    """Herdr refused the request; `code` and `message` are exactly what Herdr sent."""

    def __init__(self, code: str, message: str, *, method: str | None = None) -> None:
        super().__init__(message, method=method, request_sent=True)
        self.code = code
        #: For a refused `events.subscribe`: which entry of `subscriptions` failed (Herdr names it
        #: in the error's id, `<request id>:sub:<n>:probe`), when it says.
        self.subscription_index: int | None = None
