"""The error base of herdr-mcp: every expected failure has a stable code, a sentence, and a fault.

`HerdrMcpError` carries a stable snake_case `code` (`update_fenced`, `path_outside_root`, ...)
and one `message` that says what to do next. Its four fault classes say who is at fault, which
decides what the user can do about it and the command's exit status (`herdr-mcp --help` and
the README's CLI table list them):

- `UsageFault` (exit 2): the caller's input: a bad argument, an unknown name, a settings file
  the user wrote wrong. Fix the call.
- `RefusedFault` (exit 3): refused by policy (the update fence, the DEV plane) or by
  verification of a remote or untrusted party (a release's signatures, a candidate runtime the
  gate turned down). Retrying the same thing does not help.
- `LocalFault` (exit 4): the local environment: disk, permissions, a missing program, a port in
  use, an unreachable host or Herdr socket. Fix the workstation (or retry later).
- `InternalFault` (exit 1): a bug. Anything that is not a `HerdrMcpError` is one as well; the
  CLI lets those end with their traceback.

A tool call's refusal is a `ToolError`: its wire form (`to_dict`) is `{"code", "message",
**details}` inside the MCP result, unchanged by its place in this hierarchy.
"""

from __future__ import annotations

from typing import Any, ClassVar

EXIT_OK = 0
#: An unexpected exception: a bug (Python's own status for an uncaught exception).
EXIT_BUG = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_LOCAL = 4
#: Stopped by SIGINT (128 + 2, as a shell reports it).
EXIT_INTERRUPTED = 130

#: "Sent, answer lost": the request reached the other side and no whole answer came back, so it
#: may have taken effect. The one code for it on every plane (runtime, link, Edge, extension).
DELIVERY_UNKNOWN = "delivery_unknown"
#: The runtime's name for the same thing before issue 23. Never written any more; still read
#: (stored ledger records, answers of a runtime or link deployed earlier) as `DELIVERY_UNKNOWN`.
FORMER_DELIVERY_UNKNOWN = "delivery_uncertain"


def current_code(code: str) -> str:
    """`code` under its current name (`delivery_uncertain` is read as `delivery_unknown`)."""
    return DELIVERY_UNKNOWN if code == FORMER_DELIVERY_UNKNOWN else code


class HerdrMcpError(Exception):
    """Base of every expected failure: a stable `code` and an actionable `message`."""

    #: Which party is at fault (`usage`, `refused`, `local`, `internal`) and the exit status.
    fault: ClassVar[str] = "internal"
    exit_status: ClassVar[int] = EXIT_BUG

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    def to_dict(self) -> dict[str, Any]:
        """The JSON form printed under `--json`: `{"code", "message"}`."""
        return {"code": self.code, "message": self.message}


class UsageFault(HerdrMcpError):
    """The caller's input cannot be carried out as given."""

    fault = "usage"
    exit_status = EXIT_USAGE


class RefusedFault(HerdrMcpError):
    """Refused by policy, or by verification of a remote or untrusted party."""

    fault = "refused"
    exit_status = EXIT_REFUSED


class LocalFault(HerdrMcpError):
    """The local environment failed: disk, permissions, a missing program, a busy port."""

    fault = "local"
    exit_status = EXIT_LOCAL


class InternalFault(HerdrMcpError):
    """A broken invariant of herdr-mcp itself: a bug."""

    fault = "internal"
    exit_status = EXIT_BUG


class ToolError(UsageFault):
    """A refusal or failure with a stable `code` and an actionable `message`."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(code, message)
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        """The wire form: `{"code", "message", **details}`."""
        return {"code": self.code, "message": self.message, **self.details}
