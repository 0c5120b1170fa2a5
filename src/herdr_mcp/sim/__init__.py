"""A Herdr simulator built from Herdr's source (protocol 20, 0.8.2), for tests and demos.

Each behaviour is written from independent evidence of Herdr (its source and published schema)
and names the Herdr file it follows; it is never adjusted to make our own runtime pass. It speaks
protocol 22 (Herdr 0.9.2, the default) or 20 (`SimConfig(protocol=20)`, reporting 0.8.2) on a Unix
socket (0600): newline-delimited JSON, one request per connection, a 1 MiB line limit (a longer
line closes the connection unanswered), a 5 s wait for the line. Every refused line — bad JSON,
an unknown method, missing or ill-typed params — is answered `{"id": "", "error": {"code":
"invalid_request"}}`; unknown extra params are ignored (`sim.params`, `sim.wire`). Workspaces,
tabs and panes live in real directories; every pane runs a real shell on a pty (reaped when the
pane closes and when the simulator stops); fake agents follow scripts. It imports nothing from
the runtime.

Run it: `herdr-mcp sim --socket /tmp/herdr-sim.sock [--config session.json] [--root DIR ...]
[--fault session.snapshot[=CODE]]`, or `python -m herdr_mcp sim ...`. Each `--root` opens
a workspace with a shell pane and a fake agent pane; with neither --config nor --root, the
current directory is used.

Embed it:

    async with Simulator(SimConfig.for_roots([Path("repo")]), "/tmp/x/herdr.sock") as sim:
        sim.inject_fault("session.snapshot")            # degraded-path switch (internal_error)
        ...
    with SimulatorThread(config, socket_path) as sim:  # from synchronous code or another thread
        sim.set_agent_status("repo-agent", "working")

Config format (JSON; `SimConfig.from_json_file`). Unknown keys are refused; relative `cwd`s are
relative to the file; every `cwd` must be an existing directory:

    {
      "version": "0.9.2",                    // optional, default: 0.9.2 at 22, 0.8.2 at 20
      "protocol": 22,                        // optional: 22 (live-only lifecycle) or 20 (replay)
      "time_scale": 1.0,                     // optional: multiplies Herdr's own delays
      "workspaces": [
        {
          "cwd": "/home/me/api",             // required: the workspace root
          "label": "api",                    // optional, default: the directory name
          "tabs": [                          // optional, default: one tab with one shell pane
            {
              "label": "main",               // optional
              "panes": [                     // optional, default: one shell pane
                {"label": "shell"},
                {
                  "cwd": "services/auth",    // optional, default: the workspace cwd
                  "label": "coder",
                  "agent": {
                    "name": "auth-coder",    // required, unique; counts as a named agent
                    "kind": "claude",        // optional, default "sim" (PaneInfo.agent)
                    "status": "idle",        // optional initial state: idle|working|blocked|done
                    "script": {"steps": [...]}  // optional, default script below
                  }
                }
              ]
            }
          ]
        }
      ]
    }

Agent script format: `{"steps": [step, ...]}`, played from the start each time the agent is
prompted. A step waits `after_ms` (default 0), then echoes the prompt if `echo_prompt` is true,
then appends `output` to the pane, then sets `state` (idle, working, blocked or done):

    {"steps": [
      {"state": "working", "after_ms": 50},
      {"output": "editing files\n", "after_ms": 100},
      {"state": "done", "after_ms": 100}
    ]}

The default script is: working after 20 ms, the prompt echoed 30 ms later, done 100 ms later.
A `blocked` step holds the script until the pane receives input (`pane.send_input`); the agent
then returns to `working` and continues with the next step. A script that ends while working
leaves the agent working (useful for "busy" tests).

Behaviour worth knowing (the Herdr source each follows is named in the module that does it):
- `agent.prompt` types the text and presses Enter 300 ms later (the agent starts only then) and
  answers at once with the agent as it was (`methods/agents.py`); with `wait` it follows
  src/api/wait.rs (`waits.py`): baseline state_change_seq, a 5 s prompt-effect window
  (`agent_prompt_stalled`), `timeout` at the deadline. `agent.wait` returns at once when already
  in `until`. Herdr's own delays and windows run on `SimConfig.time_scale`; script `after_ms` not.
- Agent targets are an agent pane's id or an exact agent name (`agent_target_ambiguous` when
  several); a config agent counts as named (AgentInfo.name); AgentInfo has no `kind`/`label`.
- A prompt sent while the agent is working is queued and runs when the current script ends;
  `agent.prompt` on a blocked agent fails with `agent_blocked`.
- Typing into an agent pane: Enter submits the typed line as a prompt; any input answers a
  blocked agent; Esc/Ctrl+C interrupt a working agent. Typing into a shell pane goes to its shell.
- Events go through an event hub keeping the last 512 (`hub.py`). At protocol 20 a new lifecycle
  subscriber is first replayed them; at 22 it gets live events only. Subscriptions are polled
  every 100 ms (scaled), one event per subscription per poll (`subscriptions.py`).
- A status change bumps the session-wide state_change_seq and emits pane_agent_status_changed
  only; rollups: blocked > done > working > idle > unknown. `done` turns `idle` when the agent's
  tab is focused (seen). Ids: w1.., `<ws>:t<n>`, `<ws>:p<n>` over `123456789ABCDEFGHJKMNPQRSTVWXYZ0`,
  never reused; terminal ids `term_<hex>`.
- What there is nothing to simulate for (server.* but live handoff, integration.install/uninstall,
  plugin mutations, agent views, graphics streams, client-UI gestures) answers Herdr's
  `not_implemented`; protocol 22's viewport and copy methods and integration.list are
  simulated (`methods/viewport.py`), pane.move too (`methods/layouts.py`).
- `prompts(target)` lists the lines Enter submitted to a fake agent, in order (what it was asked,
  once per prompt; its pane shows each prompt as typed and again as the agent echoes it).
- Faults: `inject_fault(method, code=..., hang=False)` answers that Herdr error (or never
  answers with `hang=True`) until `clear_faults()`.
"""

from herdr_mcp.sim.config import (
    AgentConfig,
    AgentScript,
    PaneConfig,
    ScriptStep,
    SimConfig,
    SimConfigError,
    SimulatorError,
    TabConfig,
    WorkspaceConfig,
)
from herdr_mcp.sim.server import Simulator
from herdr_mcp.sim.thread import SimulatorThread

__all__ = [
    "AgentConfig",
    "AgentScript",
    "PaneConfig",
    "ScriptStep",
    "SimConfig",
    "SimConfigError",
    "Simulator",
    "SimulatorError",
    "SimulatorThread",
    "TabConfig",
    "WorkspaceConfig",
]
