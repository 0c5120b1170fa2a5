"""Herdr's long waits: `agent.wait`, `agent.prompt` with `wait`, `events.wait`, `pane.wait_for_output`.

Written from src/api/wait.rs: waits read the event hub from the sequence current when they
started, probe the agent (`agent.get`) when an event concerns its pane, and poll every
CONNECTION_POLL_INTERVAL. A prompt wait takes the answer's `state_change_seq` as its baseline and
first waits up to AGENT_PROMPT_EFFECT_TIMEOUT_MS (5 s, or the request's timeout when shorter) for
any state change past it (`agent_prompt_stalled` when none came and the request allowed longer,
else `timeout`); then it waits for `until` (default idle, done, blocked) within what remains.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from herdr_mcp.sim.clock import AGENT_PROMPT_EFFECT_TIMEOUT_MS, Clock
from herdr_mcp.sim.model import HerdrFailure
from herdr_mcp.sim.subscriptions import AgentStatusSubscription, match_line, output_read_source
from herdr_mcp.sim.world import World

DEFAULT_UNTIL = ("idle", "done", "blocked")
ALL_STATUSES = ("idle", "working", "blocked", "done", "unknown")


class Disconnected(Exception):
    """The client went away while waiting: Herdr answers nothing."""


@dataclass(frozen=True)
class Stalled:
    baseline: int
    window_ms: float


def not_running() -> HerdrFailure:
    return HerdrFailure("agent_not_running", "the agent no longer runs in its pane")


class Waits:
    def __init__(
        self,
        world: World,
        clock: Clock,
        prompt: Callable[[dict[str, Any]], dict[str, Any]],
        closed: Callable[[], bool],
    ) -> None:
        self.world = world
        self.clock = clock
        self._prompt = prompt
        self._closed = closed

    def agent_get(self, target: str) -> dict[str, Any]:
        return self.world.agent_info(self.world.resolve_agent(target))

    async def agent_wait(self, params: dict[str, Any]) -> dict[str, Any]:
        """Herdr: wait_for_agent; returns at once when the agent is already in `until`."""
        last = self.world.hub.current_sequence()
        initial = self.agent_get(params["target"])
        until = tuple(params.get("until") or DEFAULT_UNTIL)
        if initial["agent_status"] in until:
            return {"type": "agent_info", "agent": initial}
        agent = await self._resolved(
            params["target"], until, params.get("timeout_ms"), initial, last, None, True, None
        )
        return {"type": "agent_info", "agent": agent}

    async def agent_prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        """Herdr: prompt_agent (src/api/wait.rs)."""
        wait = params.get("wait")
        if wait is None:
            return self._prompt(params)
        target = params["target"]
        last = self.world.hub.current_sequence()
        before = self.agent_get(target)
        prompted = self._prompt(params)["agent"]
        expected_name = before.get("name") if before.get("name") == target else None
        if not _same_agent(prompted, before["terminal_id"], expected_name, before.get("agent")):
            raise not_running()
        loop = asyncio.get_running_loop()
        started = loop.time()
        baseline = prompted["state_change_seq"]
        until = tuple(wait.get("until") or DEFAULT_UNTIL)
        timeout_ms = wait.get("timeout_ms")
        initial, after = prompted, baseline
        if initial["agent_status"] != "working":
            window = self.clock.ms(AGENT_PROMPT_EFFECT_TIMEOUT_MS)
            effect_ms = window if timeout_ms is None else min(timeout_ms, window)
            stalled = (
                None if timeout_ms is not None and timeout_ms <= window else Stalled(baseline, effect_ms)
            )
            initial = await self._resolved(
                target, ALL_STATUSES, effect_ms, initial, last, baseline, False, stalled
            )
            after = None
            if initial["agent_status"] in until:
                return {"type": "agent_prompted", "agent": initial}
        remaining = None if timeout_ms is None else max(0.0, timeout_ms - (loop.time() - started) * 1000)
        agent = await self._resolved(target, until, remaining, initial, last, after, False, None)
        return {"type": "agent_prompted", "agent": agent}

    async def _resolved(
        self,
        target: str,
        until: tuple[str, ...],
        timeout_ms: float | None,
        initial: dict[str, Any],
        last: int,
        after_seq: int | None,
        accept_transient: bool,
        stalled: Stalled | None,
    ) -> dict[str, Any]:
        """Herdr: wait_for_resolved_agent."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_ms is None else loop.time() + timeout_ms / 1000
        terminal_id, agent_label, pane_id = initial["terminal_id"], initial.get("agent"), initial["pane_id"]
        name = initial.get("name") if initial.get("name") == target else None

        def probe() -> dict[str, Any]:
            try:
                current = self.agent_get(target)
            except HerdrFailure as failure:
                raise not_running() if failure.code == "agent_not_found" else failure from None
            if not _same_agent(current, terminal_id, name, agent_label):
                raise not_running()
            return current

        def matches(agent: dict[str, Any]) -> bool:
            return agent["agent_status"] in until and (
                after_seq is None or agent["state_change_seq"] > after_seq
            )

        while True:
            if self._closed():
                raise Disconnected
            should_probe, transient = False, None
            for entry in self.world.hub.events_after(last):
                last = entry.sequence
                data = entry.data
                if entry.event == "pane_agent_status_changed" and data["pane_id"] == pane_id:
                    if accept_transient and data["agent_status"] in until:
                        transient = data["agent_status"]
                    should_probe = True
                elif entry.event == "pane_agent_detected" and data["pane_id"] == pane_id:
                    if data.get("agent") and agent_label and data["agent"] != agent_label:
                        raise not_running()
                    should_probe = True
                elif entry.event == "pane_updated" and data["pane"]["pane_id"] == pane_id:
                    should_probe = True
                elif (entry.event == "pane_moved" and data["previous_pane_id"] == pane_id) or (
                    entry.event in ("pane_closed", "pane_exited") and data["pane_id"] == pane_id
                ):
                    raise not_running()
            if should_probe:
                current = probe()
                if transient is not None:
                    return {**current, "agent_status": transient}
                if matches(current):
                    return current
            if deadline is not None and loop.time() >= deadline:
                current = probe()
                if matches(current):
                    return current
                if stalled is None:
                    raise HerdrFailure("timeout", "the agent did not reach the awaited status in time")
                raise HerdrFailure(
                    "agent_prompt_stalled",
                    f"no state change followed the prompt within {stalled.window_ms:g} ms "
                    f"(status {current['agent_status']}, state_change_seq still {stalled.baseline})",
                )
            await self.clock.poll()

    async def events_wait(self, request_id: str, params: dict[str, Any]) -> dict[str, Any]:
        """Herdr: wait_for_event; only pane_agent_status_changed matches are supported."""
        loop = asyncio.get_running_loop()
        timeout_ms = params.get("timeout_ms")
        deadline = None if timeout_ms is None else loop.time() + timeout_ms / 1000
        match = params["match_event"]
        if match["event"] != "pane_agent_status_changed":
            raise HerdrFailure(
                "unsupported_event_wait_match", "events.wait supports only pane agent status matches so far"
            )
        try:
            subscription = AgentStatusSubscription(self.world, match["pane_id"], match["agent_status"])
        except HerdrFailure:
            raise HerdrFailure("pane_not_found", f"pane {match['pane_id']} not found") from None
        while True:
            if self._closed():
                raise Disconnected
            data = subscription.poll_data(strict=True)
            if data is not None:
                event = {
                    "event": "pane_agent_status_changed",
                    "data": {"type": "pane_agent_status_changed", **data},
                }
                return {"type": "wait_matched", "event": event}
            if deadline is not None and loop.time() >= deadline:
                raise HerdrFailure("timeout", "no matching event came in time")
            await self.clock.poll()

    async def wait_for_output(self, params: dict[str, Any]) -> dict[str, Any]:
        """Herdr: wait_for_output: polls a passive read of the pane until a line matches."""
        loop = asyncio.get_running_loop()
        timeout_ms = params.get("timeout_ms")
        deadline = None if timeout_ms is None else loop.time() + timeout_ms / 1000
        matcher = params["match"]
        regex = compile_regex(matcher)
        read_params = {
            "source": output_read_source(params["source"]),
            "lines": params.get("lines"),
            "strip_ansi": params.get("strip_ansi", True),
        }
        while True:
            if self._closed():
                raise Disconnected
            read = self.world.read(self.world.pane(params["pane_id"]), read_params)
            line = match_line(read["text"], matcher, regex)
            if line is not None:
                return {
                    "type": "output_matched",
                    "pane_id": read["pane_id"],
                    "revision": read["revision"],
                    "matched_line": line,
                    "read": read,
                }
            if deadline is not None and loop.time() >= deadline:
                raise HerdrFailure("timeout", "no output line matched in time")
            await self.clock.poll()


def compile_regex(matcher: dict[str, Any]) -> re.Pattern[str] | None:
    if matcher["type"] != "regex":
        return None
    try:
        return re.compile(matcher["value"])
    except re.error as exc:
        raise HerdrFailure("invalid_regex", str(exc)) from None


def _same_agent(agent: dict[str, Any], terminal_id: str, name: str | None, label: str | None) -> bool:
    """Herdr: agent_wait_identity_matches."""
    if agent["terminal_id"] != terminal_id:
        return False
    if name is not None and agent.get("name") != name:
        return False
    if label is not None:
        current = agent.get("agent")
        return current == label if current is not None else agent.get("name") is not None
    return True
