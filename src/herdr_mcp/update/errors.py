"""The updater's errors, split by who is at fault (the python-tuf split, STYLE.md; each class is
also one of the fault classes of `errors.py`, which set the exit status).

Every error carries a stable `code` (`discovery_http_error`, `discovery_redirect_refused`, ...)
and a `message` that says what happened and what to do. The class says whose fault it is, which
decides what a user can do about it:

- `ReleaseDataError`: the remote data is bad (a malformed or oversized releases index, a release
  that breaks the rules). Retrying does not help; the release has to be fixed upstream.
- `UpdateTransportError`: the transfer failed (unreachable host, TLS failure, HTTP error status,
  timeout, a redirect we refuse to follow). Retrying later may help.
- `UpdateUsageError`: the caller passed bad arguments or configuration. Fix the call.
- `UpdateRefused`: this workstation's policy refuses an update now (a DEV plane). Go back to
  PROD first.
- `LocalStateError`: the local disk or local state is unusable (unwritable staging directory,
  corrupt control file). Fix the workstation.

The same `code` may appear under two classes when the same rule is broken by different parties:
`discovery_not_https` is a `UpdateUsageError` for a configured `http://` URL and an
`UpdateTransportError` for a server redirecting to one.
"""

from __future__ import annotations

from herdr_mcp.errors import HerdrMcpError, LocalFault, RefusedFault, UsageFault


class UpdateError(HerdrMcpError):
    """Base of every updater error: a stable `code` and an actionable `message`; each subclass
    is also the fault class (`errors.py`) that says whose fault it is."""


class ReleaseDataError(RefusedFault, UpdateError):
    """The remote data (releases index, release, manifest) is malformed or breaks a rule."""


class UpdateTransportError(LocalFault, UpdateError):
    """A transfer failed: connection, TLS, HTTP status, timeout or a refused redirect."""

    #: The HTTP status of a non-200 answer (`*_http_error`), else None.
    http_status: int | None = None


class UpdateUsageError(UsageFault, UpdateError):
    """The caller passed an invalid argument or configuration."""


class UpdateRefused(RefusedFault, UpdateError):
    """This workstation's policy refuses an update now (a DEV generation is in charge)."""


class LocalStateError(LocalFault, UpdateError):
    """The local disk or the local updater state is unusable."""
