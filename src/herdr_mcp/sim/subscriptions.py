"""`events.subscribe`: Herdr's active subscriptions, each polled once per poll interval.

Written from src/api/subscriptions.rs and src/api/server.rs stream_subscriptions:
- A lifecycle subscription reads the event hub after its `last_sequence` and yields at most one
  event of its kind per poll. At protocol 20 it starts from 0, so a new subscriber is first sent
  the retained history (the last 512 events); at 22 it starts at the current sequence (live only).
- `pane.agent_status_changed` (pane_id required) starts live, after probing the pane; when its
  `agent_status` filter equals the pane's current status it sends that as an initial event.
- `pane.output_matched` probes with a read and fires when a line starts matching.
- A probe that fails ends the whole `events.subscribe` with that error, whose id is
  `<request id>:sub:<index>:probe` (index from 0 in the subscriptions list).
"""

from __future__ import annotations

import re
from typing import Any

from herdr_mcp.sim.model import HerdrFailure
from herdr_mcp.sim.world import World


def output_read_source(source: str) -> str:
    """Herdr: output_match_read_source (matching reads `recent` unwrapped)."""
    return "recent_unwrapped" if source == "recent" else source


def match_line(text: str, matcher: dict[str, Any], regex: re.Pattern[str] | None) -> str | None:
    for line in text.splitlines():
        if regex.search(line) if regex is not None else matcher["value"] in line:
            return line
    return None


class ProbeFailed(Exception):
    def __init__(self, answer: dict[str, Any]) -> None:
        super().__init__(answer["error"]["message"])
        self.answer = answer


class LifecycleSubscription:
    def __init__(self, world: World, kind: str, replay: bool) -> None:
        self.world = world
        self.kind = kind.replace(".", "_")
        self.last = 0 if replay else world.hub.current_sequence()

    def poll(self) -> dict[str, Any] | None:
        for entry in self.world.hub.events_after(self.last):
            self.last = entry.sequence
            if entry.event == self.kind:
                return entry.envelope()
        return None


class AgentStatusSubscription:
    def __init__(self, world: World, pane_id: str, status_filter: str | None) -> None:
        self.world = world
        self.last = world.hub.current_sequence()
        pane = world.pane(pane_id)
        self.pane_id = pane.pane_id
        self.filter = status_filter
        self.last_status = pane.status
        self.initial: dict[str, Any] | None = self._data(
            pane.pane_id, pane.workspace_id, pane.status, pane.agent.kind if pane.agent else None
        )
        if status_filter is None or status_filter != pane.status:
            self.initial = None

    @staticmethod
    def _data(pane_id: str, workspace_id: str, status: str, agent: str | None) -> dict[str, Any]:
        data: dict[str, Any] = {"pane_id": pane_id, "workspace_id": workspace_id, "agent_status": status}
        if agent is not None:
            data["agent"] = agent
        return data

    def poll(self) -> dict[str, Any] | None:
        data = self.poll_data()
        return None if data is None else {"event": "pane.agent_status_changed", "data": data}

    def poll_data(self, strict: bool = False) -> dict[str, Any] | None:
        """The next event's data; `strict` (events.wait) raises pane_not_found when the pane is gone."""
        saw = False
        for entry in self.world.hub.events_after(self.last):
            self.last = entry.sequence
            data = entry.data
            if entry.event != "pane_agent_status_changed" or data["pane_id"] != self.pane_id:
                continue
            saw = True
            self.last_status = data["agent_status"]
            if self.filter is not None and self.filter != data["agent_status"]:
                continue
            self.initial = None
            return {key: value for key, value in data.items() if key != "type"}
        if saw:
            self.initial = None
        elif self.initial is not None:
            initial, self.initial = self.initial, None
            return initial
        pane = self.world.panes.get(self.pane_id)
        if pane is None:
            if strict:
                raise HerdrFailure("pane_not_found", f"pane {self.pane_id} not found")
            return None
        previous, self.last_status = self.last_status, pane.status
        if previous == pane.status or (self.filter is not None and self.filter != pane.status):
            return None
        return self._data(
            pane.pane_id, pane.workspace_id, pane.status, pane.agent.kind if pane.agent else None
        )


class OutputMatchedSubscription:
    def __init__(self, world: World, spec: dict[str, Any], regex: re.Pattern[str] | None) -> None:
        self.world = world
        self.spec = spec
        self.regex = regex
        self.matching = False
        world.read(world.pane(spec["pane_id"]), self._read_params(spec["source"]))

    def _read_params(self, source: str) -> dict[str, Any]:
        return {
            "source": source,
            "lines": self.spec.get("lines"),
            "strip_ansi": self.spec.get("strip_ansi", True),
        }

    def poll(self) -> dict[str, Any] | None:
        pane = self.world.panes.get(self.spec["pane_id"])
        if pane is None:
            return None
        read = self.world.read(pane, self._read_params(output_read_source(self.spec["source"])))
        line = match_line(read["text"], self.spec["match"], self.regex)
        if line is None:
            self.matching = False
            return None
        if self.matching:
            return None
        self.matching = True
        return {
            "event": "pane.output_matched",
            "data": {"pane_id": read["pane_id"], "matched_line": line, "read": read},
        }


class ScrollSubscription:
    """Herdr: ActiveScrollChangedSubscription: probes the pane's PaneInfo.scroll, then sends
    `pane.scroll_changed` whenever a poll's snapshot of it differs (output growing the history
    changes max_offset_from_bottom too; pane.scroll at 22 changes offset_from_bottom)."""

    def __init__(self, world: World, pane_id: str) -> None:
        self.world = world
        pane = world.pane(pane_id)
        self.pane_id = pane.pane_id
        self.last = world.scroll_info(pane)

    def poll(self) -> dict[str, Any] | None:
        pane = self.world.panes.get(self.pane_id)
        if pane is None:
            return None
        scroll = self.world.scroll_info(pane)
        if scroll == self.last:
            return None
        self.last = scroll
        if scroll is None:
            return None
        return {
            "event": "pane.scroll_changed",
            "data": {"pane_id": pane.pane_id, "workspace_id": pane.workspace_id, "scroll": scroll},
        }


Active = LifecycleSubscription | AgentStatusSubscription | OutputMatchedSubscription | ScrollSubscription


def activate(
    world: World, request_id: str, subscriptions: list[dict[str, Any]], replay: bool
) -> list[Active]:
    """Herdr: ActiveSubscription::new for each; raises ProbeFailed with Herdr's error answer."""
    from herdr_mcp.sim.waits import compile_regex

    active: list[Active] = []
    for index, spec in enumerate(subscriptions):
        kind = spec["type"]
        probe_id = f"{request_id}:sub:{index}:probe"
        try:
            if kind == "pane.agent_status_changed":
                active.append(AgentStatusSubscription(world, spec["pane_id"], spec.get("agent_status")))
            elif kind == "pane.output_matched":
                try:
                    regex = compile_regex(spec["match"])
                except HerdrFailure as failure:
                    probe_id = request_id
                    raise failure from None
                active.append(OutputMatchedSubscription(world, spec, regex))
            elif kind == "pane.scroll_changed":
                active.append(ScrollSubscription(world, spec["pane_id"]))
            else:
                active.append(LifecycleSubscription(world, kind, replay))
        except HerdrFailure as failure:
            raise ProbeFailed(
                {"id": probe_id, "error": {"code": failure.code, "message": failure.message}}
            ) from None
    return active
