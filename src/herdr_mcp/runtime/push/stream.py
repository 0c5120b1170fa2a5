"""`GET /push/events` and `GET /push/state` (docs/browser-protocol.md, section 3).

The stream is Server-Sent Events written here rather than through sse-starlette (which the MCP
SDK brings along): that library's shutdown handling patches uvicorn process-wide and its pings run
beside the data sends, while this stream needs one loop that owns the order of everything it
writes: the hello, the replay, live events without duplicates, the keepalive when idle, and the
`end` event (overflow, shutdown) before it closes.

Order of a stream: subscribe to the hub first (live durable events after `start` queue up from
then on), send `hello`, replay the durable events in `(after, start]` from the log in pages, then
send queued events, skipping durable ones at or below what was already sent. A send that the
client does not take within `send_timeout` ends the stream (a client that stopped reading).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncGenerator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.push.hub import End, PushHub
from herdr_mcp.runtime.push.settings import StreamSettings
from herdr_mcp.state.push import AgentStates
from herdr_mcp.text import dumps

log = logging.getLogger(__name__)

PROTOCOL = 1
MAX_SEQ = 2**53 - 1


def frame(name: str, data: dict[str, Any], seq: int | None = None) -> bytes:
    """One SSE event: `event:`, `id:` (the seq) and one `data:` line of JSON."""
    head = f"event: {name}\n" + (f"id: {seq}\n" if seq is not None else "")
    # `dumps`: no text in an event can make its frame unencodable (docs/runtime.md "Text").
    return (head + "data: " + dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n\n").encode()


KEEPALIVE_FRAME = b": keepalive\n\n"


def parse_after(request: Request) -> int | None:
    """`?after=<seq>` (digits, at most 2^53 - 1) or None; any other query parameter is refused."""
    unknown = sorted(set(request.query_params) - {"after"})
    if unknown:
        raise ToolError("invalid_argument", f"unknown query parameter(s): {', '.join(unknown)}; only after")
    values = request.query_params.getlist("after")
    if not values:
        return None
    if len(values) > 1:
        raise ToolError("invalid_argument", "give after once", argument="after")
    raw = values[0]
    if not raw.isascii() or not raw.isdigit() or len(raw) > 16 or int(raw) > MAX_SEQ:
        raise ToolError("invalid_argument", f"after must be a seq: digits, 0 to {MAX_SEQ}", argument="after")
    return int(raw)


#: What a settle that ends a workspace's turn carries: scope -> that scope's inbox.read answer.
Inboxes = Callable[[str], dict[str, Any]]


def with_inbox(name: str, data: dict[str, Any], inboxes: Inboxes | None) -> dict[str, Any]:
    """An `agent_settled` with `workspace_working` false ends the workspace's turn: its frame carries
    `inbox`, the unacknowledged task outcomes of each scope bound to the workspace as they are when
    the frame is written (`/browser/inbox.read`'s answer per scope), so the extension's wake needs
    no round trip to list them. Nothing of it is kept in the log: a replay reads them anew."""
    if inboxes is None or name != "agent_settled" or data.get("workspace_working") is not False:
        return data
    workspace = data.get("workspace_id")
    if not isinstance(workspace, str):
        return data
    try:
        found = inboxes(workspace)
    except sqlite3.Error:
        log.warning("cannot read the inboxes of %s for its settle", workspace, exc_info=True)
        return data
    return {**data, "inbox": found}


async def event_frames(
    hub: PushHub,
    states: AgentStates,
    after: int | None,
    runtime: dict[str, Any],
    settings: StreamSettings,
    inboxes: Inboxes | None = None,
) -> AsyncGenerator[bytes, None]:
    """The frames of one stream (module docstring); ends after an `end` event."""
    subscriber = hub.subscribe()
    try:
        start = subscriber.start
        page = None if after is None else states.read(after, upto=start)
        # An `after` beyond every seq ever given is from a log that no longer exists: the replay
        # starts from the oldest event kept (gap) and the stream goes on from `start`.
        sent = start if page is None or page.unknown else max(start, after or 0)
        hello = {
            "protocol": PROTOCOL,
            "seq": sent,
            "runtime": runtime,
            "replay": {"from": after, "gap": page is not None and page.gap},
        }
        yield frame("hello", hello, sent)
        while page is not None:
            for event in page.events:
                yield frame(event.name, with_inbox(event.name, event.data, inboxes), event.seq)
            if not page.more:
                break
            page = states.read(page.upto, upto=start)
        while True:
            try:
                async with asyncio.timeout(settings.keepalive):
                    item = await subscriber.queue.get()
            except TimeoutError:
                yield KEEPALIVE_FRAME
                continue
            if isinstance(item, End):
                yield frame("end", {"reason": item.reason, "seq": sent})
                return
            if item.durable:
                if item.seq <= sent:
                    continue
                sent = item.seq
            yield frame(
                item.name, with_inbox(item.name, item.data, inboxes), item.seq if item.durable else None
            )
    finally:
        hub.unsubscribe(subscriber)


class EventStreamResponse(StreamingResponse):
    """A `text/event-stream` whose every send must be taken within `send_timeout`; a client that
    stops reading has its stream ended instead of holding it open."""

    def __init__(self, frames: AsyncGenerator[bytes, None], send_timeout: float) -> None:
        self._frames = frames
        super().__init__(
            frames,
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )
        self._send_timeout = send_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        timeout = self._send_timeout

        async def bounded_send(message: Any) -> None:
            async with asyncio.timeout(timeout):
                await send(message)

        try:
            await super().__call__(scope, receive, bounded_send)
        except TimeoutError:
            pass  # the client stopped reading; the server closes the connection
        except BaseExceptionGroup as group:  # anyio's task group may wrap it
            rest = group.subgroup(lambda exc: not isinstance(exc, TimeoutError))
            if rest is not None:
                raise rest from None
        finally:
            # However the stream ended (the client left, stopped reading, the server stops), the
            # frames' generator is closed now, so it leaves the hub now, not when collected.
            await self._frames.aclose()


def state_answer(seq: int, workspaces: list[dict[str, Any]], agents: list[dict[str, Any]]) -> dict[str, Any]:
    """`/push/state`'s body from Herdr's workspace and agent lists."""
    by_workspace: dict[str, list[dict[str, Any]]] = {}
    for agent in agents:
        workspace = agent.get("workspace_id")
        if isinstance(workspace, str):
            by_workspace.setdefault(workspace, []).append(
                {
                    "pane_id": agent.get("pane_id"),
                    "agent": agent.get("name") or agent.get("agent") or agent.get("pane_id"),
                    "status": agent.get("agent_status"),
                }
            )
    listed = []
    for workspace in workspaces:
        workspace_id = workspace.get("workspace_id")
        if not isinstance(workspace_id, str):
            continue
        members = by_workspace.pop(workspace_id, [])
        listed.append(
            {
                "workspace_id": workspace_id,
                "label": workspace.get("label"),
                "working": any(member["status"] == "working" for member in members),
                "agents": members,
            }
        )
    for workspace_id, members in sorted(by_workspace.items()):  # agents of a workspace not listed
        listed.append(
            {
                "workspace_id": workspace_id,
                "label": None,
                "working": any(member["status"] == "working" for member in members),
                "agents": members,
            }
        )
    return {"seq": seq, "workspaces": listed}
