"""A protocol-faithful Herdr simulator for tests and demos.

It speaks Herdr 0.9's socket protocol (protocol 22) on a Unix socket created with mode 0600:
newline-delimited JSON, one request per connection, 1 MiB line limit, 5 s read timeout, Herdr's
result shapes and error codes. Its workspaces and panes live in real directories, and its fake
agents follow scripts. It imports nothing from the runtime; it validates params against
`herdr_mcp.herdr.methods.NATIVE_METHODS`.

Run it: `herdr-mcp sim --socket /tmp/herdr-sim.sock [--config session.json] [--root DIR ...]
[--fault session.snapshot[=CODE]]`, or `python -m herdr_mcp.sim ...`. Each `--root` opens
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
      "version": "0.9.2",                    // optional, reported by ping and snapshot
      "protocol": 22,                        // optional
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
                    "name": "auth-coder",    // required, unique; targets the agent
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

Behaviour worth knowing:
- A prompt sent while the agent is working is queued and runs when the current script ends;
  `agent.prompt` on a blocked agent fails with `agent_blocked` and sends nothing.
- `agent.prompt` with `wait` waits for a state in `wait.until` reached during *this* prompt's
  script; `agent.wait` returns at once when the agent is already in `until`.
- `done` stays until the next prompt or a forced status: nobody "sees" a simulated pane, so it
  never decays to `idle` by itself as it does in Herdr.
- Typing into an agent pane: enter submits the typed line as a prompt; any input answers a
  blocked agent; `esc`/`ctrl+c` interrupt a working agent (it goes idle, the queue is dropped).
- Every real state change bumps the agent's `state_change_seq` (session-wide counter) and the
  pane's `revision`, and emits `pane.agent_status_changed` (to subscribers of that pane_id, as
  Herdr requires) plus the lifecycle `pane_updated`; status rolls up to tabs and workspaces
  (working > blocked > done > idle) and a workspace change emits `workspace_updated`.
- Lifecycle events emitted: workspace_created/updated/closed, tab_created/closed,
  pane_created/updated/closed, pane_agent_detected. IDs (w1, w1:t1, w1:p1) are never reused.
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
