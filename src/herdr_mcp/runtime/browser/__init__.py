"""The extension's endpoints of the runtime (docs/browser-protocol.md, section 2): `POST
/browser/<method>` (`methods`), with the JSON bodies and error answers of `http`.

The methods that change something (a pane's input, an agent's prompt, a binding, the continuity
journal, the inbox, a handoff package) are recorded in the audit log like a tools/call
(`runtime/audit.py`: identifiers, an arguments digest, no contents), written before the answer
leaves; while the log cannot be written they are refused before they run (`audit_unavailable`).
Reads are not recorded: the side panel polls them every few seconds.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from herdr_mcp import __version__
from herdr_mcp.errors import HerdrMcpError, ToolError
from herdr_mcp.runtime.audit import AuditLog, AuditUnavailable, describe_call
from herdr_mcp.runtime.browser.http import error_response, json_response, read_json_object
from herdr_mcp.runtime.browser.methods import METHODS

if TYPE_CHECKING:
    from herdr_mcp.runtime.services import Services

log = logging.getLogger(__name__)

#: The methods that change something: recorded in the audit log (module docstring).
AUDITED = frozenset(
    {
        "binding.set",
        "turn.append",
        "inbox.ack",
        "inbox.move",
        "agent.prompt",
        "pane.send_input",
        "handoff.prepare",
    }
)
#: The methods that only read. Every method is in exactly one of the two sets (a test checks it).
READS = frozenset({"binding.get", "binding.list", "turn.resolve", "inbox.read", "pane.list", "pane.read"})


def browser_routes(services: Services, audit: AuditLog) -> list[Route]:
    """`/browser/{method}` for every method of the table (any HTTP method: a wrong one is a JSON
    `method_not_allowed`, an unknown name `unknown_method`); `audit` records the mutations."""

    async def answer(name: str, request: Request) -> Response:
        method = METHODS.get(name)
        if method is None:
            known = ", ".join(sorted(METHODS))
            raise ToolError("unknown_method", f"no browser method {name!r}; the methods are {known}")
        if request.method != "POST":
            raise ToolError("method_not_allowed", f"/browser/{name} takes POST with a JSON body")
        params = await read_json_object(request)
        method.validate(params)
        if name not in AUDITED:
            return json_response(await method.run(services, params))
        if not audit.healthy:
            raise ToolError(
                "audit_unavailable",
                f"nothing was done: the runtime cannot write its audit log ({audit.last_error}); "
                f"free disk space or fix the permissions of {audit.directory}, then retry",
            )
        started, clock = dt.datetime.now(dt.UTC), time.perf_counter()
        outcome = "cancelled"
        try:
            result = await method.run(services, params)
            outcome = "ok"
        except HerdrMcpError as exc:
            outcome = exc.code
            raise
        except Exception:
            outcome = "internal_error"
            raise
        finally:
            scope = params.get("scope", params.get("from_scope"))
            record = describe_call(
                tool=f"browser/{name}",
                arguments=params,
                session=scope if isinstance(scope, str) else None,
                runtime=services.runtime_instance,
                version=__version__,
                started=started,
                outcome=outcome,
                duration_ms=(time.perf_counter() - clock) * 1000,
                known_secrets=audit.known_secrets.values(),
            )
            try:
                audit.append(record)
            except AuditUnavailable as exc:  # it has run: the answer still goes (see ToolDispatcher)
                log.error("/browser/%s answered without an audit record: %s", name, exc)
        return json_response(result)

    async def endpoint(request: Request) -> Response:
        name = request.path_params["method"]
        try:
            return await answer(name, request)
        except HerdrMcpError as exc:
            return error_response(exc)
        except Exception:
            log.exception("/browser/%s failed", name)
            return error_response(
                ToolError("internal_error", f"/browser/{name} failed inside the runtime; see its log")
            )

    return [Route("/browser/{method}", endpoint, methods=["GET", "POST", "PUT", "PATCH", "DELETE"])]


__all__ = ["AUDITED", "READS", "browser_routes"]
