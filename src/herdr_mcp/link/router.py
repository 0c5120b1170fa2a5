"""The link's request handler: `/mcp` forwarded to a generation, `/health` about the link itself.

It runs in the link's connection threads (link/server.py): the pointer, leases and session pins
(link/pointer.py), the token cache and the upstream pool are shared between them, each behind
its own lock.

Routing, for each `/mcp` request, in this order:

1. The link's own bearer (`Authorization: Bearer <link token>`), compared in constant time.
2. The whole request body was read (at most `MAX_BODY_BYTES`) before a generation is chosen,
   so a client that goes away mid-body never reaches a generation.
3. The generation: the one a legacy MCP session is pinned to (`Mcp-Session-Id` seen on an answer
   of that generation), else the `active` one of `runtime-status.json`.
4. A lease on that generation is held until the answer is fully relayed: a request that entered A
   finishes on A even when `active` moves to B meanwhile (`/health` counts them). While a major
   migration drains that generation (link/drain.py), a request that may mutate is refused here,
   before anything is sent (503 `not_delivered`, reason `generation_draining`).
5. The request goes to `<endpoint>/mcp` with that generation's bearer, exactly once; the answer
   (JSON or an SSE stream) is relayed as it arrives, tagged `herdr-mcp-generation: <id>`. A
   client that closes its connection meanwhile ends the exchange with the generation too.

Failure semantics. A request is never retried, on the same generation or another: the link cannot
know whether a tool call it sent was carried out, and a retry could carry it out twice.

- Nothing was sent, or nothing ran (no active generation, its token unreadable, its port refuses
  the connection, the connection pool is exhausted, its bearer gate refused the link's token for
  it): 503 with a JSON-RPC error, `data.code` `not_delivered` and `data.reason`. The client may
  resend; the link does not.
- Sent, but no complete answer head came back (the generation died or broke the connection): 502,
  `data.code` `delivery_unknown`. The call may or may not have run; re-observe before repeating a
  mutation (the runtime's idempotency keys are made for this).
- The answer had started: the status is already on the wire, so the link drops the connection
  instead of ending the body cleanly; the client sees a broken response, never a truncated one
  that looks whole.

Legacy sessions (protocol versions before 2026-07-28 carry `Mcp-Session-Id`): a session lives in
the generation that created it, so it stays pinned there across activations until it is deleted.
A session whose generation is removed from the control file ends: the link answers 404, which
tells an MCP client to start a new session (on the active generation). A session id the link does
not know (e.g. after a link restart) goes to the active generation, which answers 404 itself if
the session is not its own. Modern (2026-07-28) requests carry no session and always follow
`active`.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from herdr_mcp.generations import (
    Generation,
    GenerationError,
    GenerationStore,
    TokenReader,
    default_token_reader,
)
from herdr_mcp.link.drain import DRAINING_REASON, Drain
from herdr_mcp.link.pointer import ActivePointer, Leases, SessionPins
from herdr_mcp.link.server import MAX_BODY_BYTES, ClientConnection, Request, error_body
from herdr_mcp.link.upstream import (
    AnswerBroken,
    ClientGone,
    ClientWatch,
    DeliveryUnknown,
    NotDelivered,
    Response,
    UpstreamPool,
)
from herdr_mcp.strict_json import MESSAGE_LIMITS, JsonLimitExceeded, JsonLimits, check_bounds, loads_bounded

log = logging.getLogger("herdr_mcp.link")

#: A generation's bearer is re-read from its token file at most this often (and after a 401).
TOKEN_RECHECK_S = 1.0
#: JSON-RPC "server error" range: the link's own failures.
LINK_ERROR_CODE = -32000
GENERATION_HEADER = "herdr-mcp-generation"
SESSION_HEADER = "mcp-session-id"
#: Never forwarded in either direction (RFC 9110 7.6.1), plus what the link sets itself.
_HOP_BY_HOP = frozenset(
    {
        b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"proxy-connection",
        b"te", b"trailer", b"transfer-encoding", b"upgrade",
    }
)  # fmt: skip
#: `expect`: the link has the whole body before it sends; a 100-continue would only be in the way.
_NOT_FORWARDED = _HOP_BY_HOP | {b"host", b"authorization", b"content-length", b"expect"}
#: `content-length`: the link frames the body it relays itself.
_NOT_RELAYED = _HOP_BY_HOP | {b"date", b"server", b"content-length"}
_SESSION = SESSION_HEADER.encode()
_GENERATION = GENERATION_HEADER.encode()


class LinkRefusal(Exception):
    """A request the link answers itself: HTTP `status`, stable `code`, what to do in `message`."""

    def __init__(self, status: int, code: str, message: str, reason: str | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.reason = reason


class UpstreamBroken(Exception):
    """The generation broke its answer after the link had started relaying it."""


# -- the /mcp endpoint ------------------------------------------------------------------------


#: What the link reads of a /mcp body (docs/runtime.md "Parse boundaries"): the message bounds
#: within the link's body size; a body past them is refused before any generation sees it.
BODY_LIMITS = JsonLimits(max_bytes=MAX_BODY_BYTES, max_items=MESSAGE_LIMITS.max_items)


def _jsonrpc_error(body: bytes, refusal: LinkRefusal) -> bytes:
    request_id: object = None
    with contextlib.suppress(ValueError):  # a body past the bounds or not JSON: no id to echo
        message = loads_bounded(body, BODY_LIMITS, strict=False)
        if isinstance(message, dict):
            request_id = message.get("id")
    data: dict[str, Any] = {"code": refusal.code}
    if refusal.reason is not None:
        data["reason"] = refusal.reason
    error = {"code": LINK_ERROR_CODE, "message": refusal.message, "data": data}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()


class _Tokens:
    """Each generation's bearer as an `Authorization` value, re-read at most every `TOKEN_RECHECK_S`.

    Reading the token file on every request cost more than the rest of the routing. A changed token
    is picked up within `TOKEN_RECHECK_S`, and at once after the generation refused the one sent
    (that request is answered `generation_unauthorized`: nothing ran, the client may resend).
    Shared by the connection threads without a lock: each dict operation is atomic, and two
    threads reading the same token file at once is harmless.
    """

    def __init__(self, reader: TokenReader, clock: Callable[[], float] = time.monotonic) -> None:
        self._reader = reader
        self._clock = clock
        self._cache: dict[tuple[str, str, str | None], tuple[float, bytes]] = {}

    def authorization(self, spec: Generation) -> bytes:
        key = (spec.generation, spec.endpoint, spec.token_file)
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and now - cached[0] < TOKEN_RECHECK_S:
            return cached[1]
        try:
            token = self._reader(spec)
        except GenerationError as exc:
            raise LinkRefusal(503, "not_delivered", exc.message, exc.code) from exc
        if not token or not all(33 <= ord(char) < 127 for char in token):
            raise LinkRefusal(
                503,
                "not_delivered",
                f"the bearer token of generation {spec.generation} holds characters a header cannot carry",
                "token_unavailable",
            )
        if len(self._cache) >= 64:
            self._cache.clear()
        value = b"Bearer " + token.encode("ascii")
        self._cache[key] = (now, value)
        return value

    def forget(self, spec: Generation) -> None:
        self._cache.pop((spec.generation, spec.endpoint, spec.token_file), None)


class McpForwarder:
    """`/mcp` (module docstring: routing and failure semantics)."""

    def __init__(
        self,
        store: GenerationStore,
        token: str,
        token_file: Path,
        token_reader: TokenReader,
        pool: UpstreamPool,
    ) -> None:
        self.pointer = ActivePointer(store)
        self.leases = Leases()
        self.sessions = SessionPins()
        self._expected = f"Bearer {token}".encode()
        self._token_file = token_file
        self._tokens = _Tokens(token_reader)
        self._pool = pool
        self.drain = Drain(store.state_dir)
        self._stop = threading.Event()
        threading.Thread(
            target=self.drain.run_checks, args=(self._stop,), name="link-drain", daemon=True
        ).start()

    def close(self) -> None:
        """Stop the drain's timer."""
        self._stop.set()

    def _enter(self, spec: Generation, body: bytes, mutation: bool | None = None) -> None:
        if not self.drain.admit(spec.generation, body, mutation):
            raise LinkRefusal(
                503,
                "not_delivered",
                f"generation {spec.generation} takes no mutations while a major migration (update "
                "major-apply) moves its state; nothing was sent: resend in a few seconds",
                DRAINING_REASON,
            )

    def __call__(self, request: Request, client: ClientConnection) -> None:
        authorization = session = b""
        for name, value in request.headers:
            if name == b"authorization":
                authorization = value
            elif name == _SESSION:
                session = value
        # 1. the link's own bearer
        if not hmac.compare_digest(authorization, self._expected):
            self._unauthorized(client)
            return
        # 2. the whole body came before any routing (the server hands over complete requests)
        try:
            if request.oversized:
                raise LinkRefusal(
                    413,
                    "not_delivered",
                    f"the request is larger than {MAX_BODY_BYTES} bytes, which no generation accepts; "
                    "send large content in smaller pieces",
                    "json_too_large",
                )
            try:
                check_bounds(request.body, BODY_LIMITS)
            except JsonLimitExceeded as exc:
                message = f"{exc.message}; nothing was sent"
                raise LinkRefusal(400, "not_delivered", message, exc.code) from None
            # 3. the generation
            spec = self._route(session.decode("latin-1"))
            # 4. the drain, the lease, 5. exactly one send
            self._enter(spec, request.body)
            self.leases.take(spec.generation)
            try:
                self._relay(request, client, spec, session)
            finally:
                self.leases.give_back(spec.generation)
                self.drain.finished(spec.generation, request.body)
        except LinkRefusal as refusal:
            client.answer(refusal.status, _jsonrpc_error(request.body, refusal))
        except ClientGone:
            client.must_close = True  # the exchange with the generation ended with it
        except UpstreamBroken as exc:
            log.warning("%s", exc)
            client.must_close = True  # a broken answer must not look whole

    def authorized(self, request: Request) -> bool:
        """Whether `request` carries the link's own bearer (compared in constant time)."""
        return hmac.compare_digest(request.header(b"authorization") or b"", self._expected)

    def _unauthorized(self, client: ClientConnection) -> None:
        description = f"send the link's bearer token, kept in {self._token_file}"
        challenge = ((b"www-authenticate", b'Bearer realm="herdr-mcp-link"'),)
        client.answer(401, error_body("unauthorized", description), challenge)

    def _route(self, session: str) -> Generation:
        pointer = self.pointer.current()
        pinned = self.sessions.generation_of(session) if session else None
        if pinned is not None:
            try:
                return pointer.control.find(pinned)
            except GenerationError:
                self.sessions.forget(session)
                raise LinkRefusal(
                    404,
                    "session_ended",
                    f"this MCP session lived in generation {pinned}, which was removed; start a new session",
                ) from None
        active = pointer.status.active
        if active is None:
            raise LinkRefusal(
                503,
                "not_delivered",
                "no generation is active: run `herdr-mcp start` (it makes this install the active "
                "generation and starts its runtime), or `herdr-mcp generation activate <id>`",
                "no_active_generation",
            )
        try:
            return pointer.control.find(active)
        except GenerationError:
            raise LinkRefusal(
                503,
                "not_delivered",
                f"the active generation {active} is not in the control file; re-register or activate another",
                "active_generation_unknown",
            ) from None

    def _relay(self, request: Request, client: ClientConnection, spec: Generation, session: bytes) -> None:
        headers = [(name, value) for name, value in request.headers if name not in _NOT_FORWARDED]
        target = b"/mcp?" + request.query if request.query else b"/mcp"
        response = self._send(spec, request.method, target, headers, request.body, ClientWatch(client.sock))
        try:
            if response.status == 401:
                # The generation's bearer gate refused before dispatch, so nothing ran. Relaying
                # the 401 would tell the client that ITS token (the link's) is wrong.
                raise self._generation_unauthorized(spec)
            self._follow_session(request.method, session, response, spec)
            self._relay_answer(response, client, spec)
        finally:
            response.close()

    async def exchange(
        self, headers: list[tuple[bytes, bytes]], body: bytes, tool: str, max_bytes: int
    ) -> tuple[str, int, bytes]:
        """One `tools/call` of `tool` POSTed to `/mcp` of the active generation (steps 3-5 for a
        request that did not come over HTTP: the Edge's `tool_request`), on the running asyncio
        loop, read whole: (generation, status, body). Whether it may mutate (the drain) is read from
        `tool`: `body` is the link's own, one call of it.

        Raises `LinkRefusal` (`not_delivered`, `delivery_unknown`; `result_too_large` when the body
        passes `max_bytes`, the call having run) and `UpstreamBroken` when the body broke off. The
        caller gives up (a cancel, a deadline) by cancelling the awaiting task: the connection to
        the generation closes, as when a local client goes away.
        """
        spec = self._route("")
        mutation = tool not in self.drain.reads
        self._enter(spec, body, mutation)
        self.leases.take(spec.generation)
        try:
            response = await self._send_async(spec, headers, body)
            try:
                if response.status == 401:
                    raise self._generation_unauthorized(spec)
                received = bytearray()
                while not response.done:
                    try:
                        received += await response.read_async()
                    except AnswerBroken as exc:
                        raise UpstreamBroken(
                            f"generation {spec.generation} broke its answer ({exc.reason})"
                        ) from exc
                    if len(received) > max_bytes:
                        raise LinkRefusal(
                            502, "result_too_large", f"the answer is larger than {max_bytes} bytes"
                        )
                return spec.generation, response.status, bytes(received)
            finally:
                response.close()
        finally:
            self.leases.give_back(spec.generation)
            self.drain.finished(spec.generation, body, mutation)

    def _generation_unauthorized(self, spec: Generation) -> LinkRefusal:
        self._tokens.forget(spec)
        return LinkRefusal(
            503,
            "not_delivered",
            f"generation {spec.generation} refused the bearer the link sent it; register it "
            "with its own token file (`herdr-mcp generation register --token-file`)",
            "generation_unauthorized",
        )

    def _send(
        self,
        spec: Generation,
        method: bytes,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        watch: ClientWatch,
    ) -> Response:
        """Send once to `spec`, never again: its answer's head, or `LinkRefusal` saying whether it ran."""
        headers.append((b"authorization", self._tokens.authorization(spec)))
        try:
            return self._pool.request(spec.endpoint, method, target, headers, body, watch)
        except NotDelivered as exc:
            raise _not_delivered(spec, exc) from exc
        except DeliveryUnknown as exc:
            raise _delivery_unknown(spec, exc) from exc

    async def _send_async(
        self, spec: Generation, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> Response:
        """`_send` of a POST to `/mcp`, on the running asyncio loop."""
        headers.append((b"authorization", self._tokens.authorization(spec)))
        try:
            return await self._pool.request_async(spec.endpoint, b"POST", b"/mcp", headers, body)
        except NotDelivered as exc:
            raise _not_delivered(spec, exc) from exc
        except DeliveryUnknown as exc:
            raise _delivery_unknown(spec, exc) from exc

    @staticmethod
    def _relay_answer(response: Response, client: ClientConnection, spec: Generation) -> None:
        """The answer's head, then its body as it arrives; a short answer goes out in one write."""
        relayed = [(name, value) for name, value in response.headers if name not in _NOT_RELAYED]
        relayed.append((_GENERATION, spec.generation.encode()))
        out, chunked = client.head(response.status, relayed, response.length)
        if response.length is None and not response.ready():
            # A stream (SSE) may wait long for its first event: its head goes out now. An answer
            # with a Content-Length goes out with its body in one write (one wake-up of the client).
            client.send(bytes(out))
            out.clear()
        while not response.done:
            try:
                piece = response.read()
            except AnswerBroken as exc:
                if out:
                    client.send(bytes(out))
                raise UpstreamBroken(
                    f"generation {spec.generation} broke its answer mid-way ({exc.reason}); "
                    "dropping the client connection"
                ) from exc
            if piece:
                out += b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece
            if out and not response.done:
                client.send(bytes(out))
                out.clear()
        if chunked:
            out += b"0\r\n\r\n"
        client.send(bytes(out))

    def _follow_session(self, method: bytes, sent: bytes, response: Response, spec: Generation) -> None:
        created = response.header(_SESSION)
        if created:
            self.sessions.pin(created.decode("latin-1"), spec.generation)
        if sent and ((method == b"DELETE" and response.status < 300) or response.status == 404):
            self.sessions.forget(sent.decode("latin-1"))


def _not_delivered(spec: Generation, exc: NotDelivered) -> LinkRefusal:
    return LinkRefusal(
        503,
        "not_delivered",
        f"generation {spec.generation} at {spec.endpoint} did not accept the connection; "
        "nothing was sent, the request may be sent again",
        exc.reason,
    )


def _delivery_unknown(spec: Generation, exc: DeliveryUnknown) -> LinkRefusal:
    return LinkRefusal(
        502,
        "delivery_unknown",
        f"generation {spec.generation} failed after the request was sent; it may or may not "
        "have been carried out: check its effect before sending it again",
        exc.reason,
    )


# -- the link ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinkConfig:
    """What the link serves: the generations state dir and its own bearer."""

    store: GenerationStore
    token: str
    token_file: Path
    token_reader: TokenReader | None = None


class EdgeSide(Protocol):
    """The link's connection to the Edge as the handler sees it (`link/edge.py`)."""

    def status(self) -> dict[str, Any]:
        """The Edge state, no secret."""

    def control(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """A control request's answer (`{"result"}` or `{"error"}`); raises `LinkRefusal`."""


#: A control request body is a method name and a few ids.
MAX_CONTROL_BODY_BYTES = 16 * 1024
CONTROL_LIMITS = JsonLimits(max_bytes=MAX_CONTROL_BODY_BYTES, max_items=1024)


class LinkHandler:
    """The link's request handler (for `LinkServer`): `/mcp` forwarded, `/health` answered, and
    `/edge/control` (the owner's connector commands, carried to the Edge) when `edge` is set."""

    def __init__(self, config: LinkConfig) -> None:
        self.pool = UpstreamPool()
        self.forwarder = McpForwarder(
            config.store,
            config.token,
            config.token_file,
            config.token_reader or default_token_reader(config.store),
            self.pool,
        )
        #: Set once before the server starts (the Edge side is built around `forwarder`).
        self.edge: EdgeSide | None = None

    def __call__(self, request: Request, client: ClientConnection) -> None:
        if request.path == b"/mcp":
            self.forwarder(request, client)
        elif request.path == b"/edge/control":
            self._edge_control(request, client)
        elif request.path == b"/health":
            if request.method == b"GET":
                client.answer(200, json.dumps(self.health()).encode())
            else:
                client.answer(
                    405, error_body("method_not_allowed", "/health answers GET"), ((b"allow", b"GET"),)
                )
        else:
            client.answer(404, error_body("not_found", "the link serves /mcp and /health"))

    def health(self) -> dict[str, Any]:
        pointer = self.forwarder.pointer.current()
        return {
            "status": "ok",
            "product": "herdr-mcp-link",
            "active": pointer.status.active,
            "previous": pointer.status.previous,
            "outcome": pointer.status.outcome,
            "transition_seq": pointer.status.transition_seq,
            "pointer_error": pointer.error,
            "in_flight": self.forwarder.leases.in_flight(),
            "pinned_sessions": len(self.forwarder.sessions),
            "edge": {"state": "unpaired"} if self.edge is None else self.edge.status(),
        }

    def _edge_control(self, request: Request, client: ClientConnection) -> None:
        """`POST /edge/control` `{"method", "params"}` with the link's bearer: the Edge's answer."""
        if not self.forwarder.authorized(request):
            self.forwarder._unauthorized(client)
            return
        if request.method != b"POST":
            client.answer(
                405, error_body("method_not_allowed", "/edge/control answers POST"), ((b"allow", b"POST"),)
            )
            return
        try:
            message = loads_bounded(request.body, CONTROL_LIMITS, strict=False)
        except ValueError:
            message = None
        if not (
            isinstance(message, dict)
            and isinstance(message.get("method"), str)
            and isinstance(message.get("params"), dict)
        ):
            client.answer(
                400,
                json.dumps({"error": {"code": "bad_request", "message": "send {method, params}"}}).encode(),
            )
            return
        try:
            if self.edge is None:
                raise LinkRefusal(
                    503, "edge_unpaired", "this workstation is not paired; run `herdr-mcp link pair`"
                )
            answer = self.edge.control(message["method"], message["params"])
        except LinkRefusal as refusal:
            client.answer(
                refusal.status,
                json.dumps({"error": {"code": refusal.code, "message": refusal.message}}).encode(),
            )
            return
        client.answer(200, json.dumps(answer).encode())

    def close(self) -> None:
        """Close the idle upstream connections (exchanges in flight close theirs when they end)."""
        self.pool.close()
        self.forwarder.close()
