"""The Control Center's endpoints (`POST /browser/pane.list`, `pane.read`, `agent.prompt`,
`pane.send_input`; runtime/browser/control.py) against a real uvicorn on loopback and on the Unix
socket, a real Herdr simulator and a real state.db: the panes with their agents, bounded reads,
a prompt delivered once for one idempotency key, target fencing (`target_changed`), typing
refused into an agent pane (`pane_has_agent`) and delivered into a terminal pane, and bad
requests refused with stable codes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from herdr_mcp.herdr import HerdrClient
from herdr_mcp.runtime.browser.control import MAX_READ_CHARS
from herdr_mcp.sim import SimulatorThread
from tests.support.browser_methods_harness import TRANSPORTS, browser_api, call
from tests.support.sim_helpers import fast_script, prompts_through, run, short_tmp_dir, two_project_config
from tests.support.waiting import poll_until, wait_until_async

BODY_TIMEOUT_S = 90.0


@pytest.fixture
def tmp_short() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


def pane_named(sim: SimulatorThread, label: str) -> str:
    return str(next(p["pane_id"] for p in sim.snapshot()["panes"] if p["label"] == label))


async def herdr_text(sim: SimulatorThread, pane_id: str) -> str:
    """The pane's output as Herdr itself shows it (not through the runtime)."""
    read = await HerdrClient(sim.socket_path).call(
        "pane.read", {"pane_id": pane_id, "source": "recent_unwrapped", "lines": 1000}
    )
    return str(read["read"]["text"])


@pytest.mark.parametrize("via", TRANSPORTS)
def test_panes_are_listed_with_their_agents_and_read_within_caps(tmp_short: Path, via: str) -> None:
    async def body() -> None:
        config = two_project_config(tmp_short, fast_script())
        async with browser_api(tmp_short, config, via) as (sim, _rt, client):
            shell, coder = pane_named(sim, "shell"), pane_named(sim, "coder")
            status, listed = await call(client, "pane.list", {})
            assert status == 200
            by_id = {p["pane_id"]: p for p in listed["panes"]}
            assert by_id[shell]["agent"] is None and by_id[shell]["workspace_id"] == "w1"
            assert by_id[coder]["agent"] == "coder" and by_id[coder]["agent_kind"] == "claude"
            assert by_id[coder]["status"] in ("idle", "done", "working")
            assert {p["workspace_id"] for p in listed["panes"]} == {"w1", "w2"}
            status, only = await call(client, "pane.list", {"workspace_id": "w2"})
            assert [p["agent"] for p in only["panes"]] == ["reviewer"]

            sim.append_output(shell, "".join(f"line {n}\n" for n in range(300)))
            status, read = await call(client, "pane.read", {"pane_id": shell, "lines": 5})
            assert status == 200
            assert read["text"].splitlines()[-1] == "line 299"
            assert len(read["text"].splitlines()) <= 5 and read["truncated"] is True
            assert read["capped"] is False and read["workspace_id"] == "w1"

            wide = "x" * 400 + "\n"
            sim.append_output(shell, wide * 200)
            status, read = await call(client, "pane.read", {"pane_id": shell, "lines": 200})
            assert status == 200 and read["capped"] is True
            assert len(read["text"]) == MAX_READ_CHARS

            for bad in (
                {"pane_id": shell, "lines": 201},
                {"pane_id": shell, "lines": 0},
                {"pane_id": shell, "source": "visible"},
                {"lines": 5},
                {"pane_id": "w1 p1"},
            ):
                status, answer = await call(client, "pane.read", bad)
                assert (status, answer["error"]["code"]) == (400, "invalid_argument"), bad
            status, answer = await call(client, "pane.read", {"pane_id": "w9:p9"})
            assert (status, answer["error"]["code"]) == (404, "pane_not_found")

    run(body(), BODY_TIMEOUT_S)


@pytest.mark.parametrize("via", TRANSPORTS)
def test_a_prompt_with_one_key_is_delivered_once_and_fenced(tmp_short: Path, via: str) -> None:
    async def body() -> None:
        config = two_project_config(tmp_short, fast_script())
        async with browser_api(tmp_short, config, via) as (sim, _rt, client):
            coder, reviewer = (
                pane_named(sim, "coder"),
                next(a["pane_id"] for a in sim.snapshot()["agents"] if a["name"] == "reviewer"),
            )
            prompt = {
                "pane_id": coder,
                "workspace_id": "w1",
                "agent": "coder",
                "text": "cc-first-prompt please",
                "idempotency_key": "cc-key-0001",
            }
            status, first = await call(client, "agent.prompt", prompt)
            assert status == 200, first
            assert first["state"] == "submitted" and first["idempotent_replay"] is False
            assert first["agent"]["name"] == "coder" and first["task_id"].startswith("task_")
            status, again = await call(client, "agent.prompt", prompt)
            assert status == 200 and again["idempotent_replay"] is True
            assert again["task_id"] == first["task_id"]

            # A later prompt reaches the agent after anything sent before it: once the agent took
            # it, a second delivery of the first would have been taken too.
            later = {**prompt, "text": "cc-second-prompt", "idempotency_key": "cc-key-0002"}
            assert (await call(client, "agent.prompt", later))[0] == 200
            taken = await wait_until_async(
                lambda: prompts_through(sim, "coder", "cc-second-prompt"), "the agent taking the later prompt"
            )
            assert taken == ["cc-first-prompt please", "cc-second-prompt"]

            # The same key with another text is a conflict, not a delivery.
            status, answer = await call(client, "agent.prompt", {**prompt, "text": "other"})
            assert (status, answer["error"]["code"]) == (409, "idempotency_key_conflict")

            # Fencing: the wrong agent, the wrong workspace, a pane without an agent.
            fenced = {**prompt, "idempotency_key": "cc-key-0003"}
            status, answer = await call(client, "agent.prompt", {**fenced, "agent": "tester"})
            assert (status, answer["error"]["code"]) == (409, "target_changed")
            assert answer["error"]["agent"] == "coder"
            status, answer = await call(client, "agent.prompt", {**fenced, "workspace_id": "w2"})
            assert (status, answer["error"]["code"]) == (409, "target_changed")
            status, answer = await call(
                client, "agent.prompt", {**fenced, "pane_id": pane_named(sim, "shell"), "agent": "coder"}
            )
            assert (status, answer["error"]["code"]) == (409, "target_changed")
            assert answer["error"]["agent"] is None
            # A refused key was released: it delivers once the target is right.
            status, answer = await call(
                client,
                "agent.prompt",
                {**fenced, "pane_id": reviewer, "workspace_id": "w2", "agent": "reviewer"},
            )
            assert status == 200 and answer["idempotent_replay"] is False

            # The agent's pane is closed: pane_not_found, nothing recorded.
            sim.close_pane(coder)
            status, answer = await call(client, "agent.prompt", {**prompt, "idempotency_key": "cc-key-0004"})
            assert (status, answer["error"]["code"]) == (404, "pane_not_found")

    run(body(), BODY_TIMEOUT_S)


@pytest.mark.parametrize("via", TRANSPORTS)
def test_send_input_goes_to_a_terminal_pane_and_never_into_an_agent(tmp_short: Path, via: str) -> None:
    async def body() -> None:
        config = two_project_config(tmp_short, fast_script())
        async with browser_api(tmp_short, config, via) as (sim, _rt, client):
            shell, coder = pane_named(sim, "shell"), pane_named(sim, "coder")
            typed = {
                "pane_id": shell,
                "workspace_id": "w1",
                "text": "echo cc-typed",
                "idempotency_key": "input-0001",
            }
            status, sent = await call(client, "pane.send_input", typed)
            assert status == 200 and sent["state"] == "sent" and sent["idempotent_replay"] is False
            status, again = await call(client, "pane.send_input", typed)
            assert status == 200 and again["idempotent_replay"] is True
            # Enter was pressed: the next input starts a line of its own.
            status, _ = await call(
                client, "pane.send_input", {**typed, "text": "echo next", "idempotency_key": "input-0009"}
            )
            assert status == 200
            # The pane runs a real shell: each command's output follows its line, once the shell
            # got to it (Herdr answers pane.send_input when the bytes are queued).
            expected = "echo cc-typed\ncc-typed\necho next"

            async def shown() -> str | None:
                text = await herdr_text(sim, shell)
                return text if expected in text else None

            text = await poll_until(shown, "the typed lines in the shell pane")
            assert text.count("echo cc-typed") == 1

            status, answer = await call(
                client, "pane.send_input", {**typed, "pane_id": coder, "idempotency_key": "input-0002"}
            )
            assert (status, answer["error"]["code"]) == (409, "pane_has_agent")
            assert answer["error"]["agent"] == "coder"
            assert "echo cc-typed" not in await herdr_text(sim, coder)

            status, answer = await call(
                client,
                "pane.send_input",
                {**typed, "workspace_id": "w2", "idempotency_key": "input-0003"},
            )
            assert (status, answer["error"]["code"]) == (409, "target_changed")

            for bad in (
                {**typed, "text": "two\nlines"},
                {**typed, "keys": ["ctrl+c"]},
                {**typed, "idempotency_key": "short"},
                {key: value for key, value in typed.items() if key != "workspace_id"},
                {**typed, "text": "x" * 4001},
            ):
                status, answer = await call(client, "pane.send_input", bad)
                assert (status, answer["error"]["code"]) == (400, "invalid_argument"), bad
            assert (await herdr_text(sim, shell)).count("echo cc-typed") == 1

    run(body(), BODY_TIMEOUT_S)
