"""The extension's endpoints of the runtime (docs/browser-protocol.md, section 2): `POST
/browser/<method>` (`methods`), with the JSON bodies and error answers of `http`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from herdr_mcp.errors import HerdrMcpError, ToolError
from herdr_mcp.runtime.browser.http import error_response, read_json_object
from herdr_mcp.runtime.browser.methods import METHODS

if TYPE_CHECKING:
    from herdr_mcp.runtime.services import Services

log = logging.getLogger(__name__)


def browser_routes(services: Services) -> list[Route]:
    """`/browser/{method}` for every method of the table (any HTTP method: a wrong one is a JSON
    `method_not_allowed`, an unknown name `unknown_method`)."""

    async def endpoint(request: Request) -> Response:
        name = request.path_params["method"]
        try:
            method = METHODS.get(name)
            if method is None:
                known = ", ".join(sorted(METHODS))
                raise ToolError("unknown_method", f"no browser method {name!r}; the methods are {known}")
            if request.method != "POST":
                raise ToolError("method_not_allowed", f"/browser/{name} takes POST with a JSON body")
            params = await read_json_object(request)
            method.validate(params)
            return JSONResponse(await method.run(services, params))
        except HerdrMcpError as exc:
            return error_response(exc)
        except Exception:
            log.exception("/browser/%s failed", name)
            return error_response(
                ToolError("internal_error", f"/browser/{name} failed inside the runtime; see its log")
            )

    return [Route("/browser/{method}", endpoint, methods=["GET", "POST", "PUT", "PATCH", "DELETE"])]


__all__ = ["browser_routes"]
