"""What a simulated Herdr session contains: workspaces, tabs, panes, and scripted fake agents.

`SimConfig.from_dict` is the one parse boundary for the JSON format documented in the package
docstring; it raises `SimConfigError` and refuses unknown keys. A config that exists is valid,
except that directories are checked again when the simulator builds its session.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from herdr_mcp.errors import UsageFault
from herdr_mcp.strict_json import JsonLimits, loads_bounded

HERDR_VERSION = "0.9.2"
HERDR_PROTOCOL = 22
PROTOCOL_VERSIONS = {20: "0.8.2", 22: HERDR_VERSION}
"""The protocols the simulator can speak and the Herdr version each reports by default."""

SCRIPT_STATES: tuple[str, ...] = ("idle", "working", "blocked", "done")
"""States a script step may put an agent in (`unknown` is reserved for panes without an agent)."""

MAX_STEP_DELAY_MS = 3_600_000
#: A config file (docs/runtime.md "Parse boundaries"): a few workspaces and scripted agents.
CONFIG_LIMITS = JsonLimits(max_bytes=4 * 1024 * 1024, max_items=100_000)
"""An hour: longer delays are surely a typo for seconds."""


class SimulatorError(UsageFault):
    """The simulator cannot do what was asked; the message says why and what to change."""

    code = "sim_config_invalid"

    def __init__(self, message: str) -> None:
        super().__init__(self.code, message)

    def __str__(self) -> str:
        return self.message


class SimConfigError(SimulatorError):
    """A simulator config (JSON file, dict or dataclasses) is invalid."""


@dataclass(frozen=True)
class ScriptStep:
    """One step of an agent's script, applied `after_ms` after the previous step.

    Within a step, the prompt echo comes first, then `output`, then the `state` change.
    """

    after_ms: int = 0
    state: str | None = None
    output: str | None = None
    echo_prompt: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.after_ms, bool) or not isinstance(self.after_ms, int):
            raise SimConfigError("script step after_ms must be an integer number of milliseconds")
        if not 0 <= self.after_ms <= MAX_STEP_DELAY_MS:
            raise SimConfigError(f"script step after_ms must be between 0 and {MAX_STEP_DELAY_MS}")
        if self.state is not None and self.state not in SCRIPT_STATES:
            raise SimConfigError(f"script step state must be one of {', '.join(SCRIPT_STATES)}")


@dataclass(frozen=True)
class AgentScript:
    """What a fake agent does each time it is prompted."""

    steps: tuple[ScriptStep, ...]

    @classmethod
    def default(cls) -> AgentScript:
        """Working after a short delay, the prompt echoed to the pane, then done."""
        return cls(
            (
                ScriptStep(after_ms=20, state="working"),
                ScriptStep(after_ms=30, echo_prompt=True),
                ScriptStep(after_ms=100, state="done"),
            )
        )

    @classmethod
    def from_dict(cls, raw: object) -> AgentScript:
        body = _object(raw, "agent script", {"steps"})
        steps = body.get("steps")
        if not isinstance(steps, list):
            raise SimConfigError("agent script needs a `steps` list")
        return cls(tuple(_step(item, index) for index, item in enumerate(steps)))


@dataclass(frozen=True)
class AgentConfig:
    """A fake agent living in a pane; `name` is unique in the session and targets it."""

    name: str
    kind: str = "sim"
    status: str = "idle"
    script: AgentScript = field(default_factory=AgentScript.default)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise SimConfigError("an agent needs a non-empty name")
        if ":" in self.name:
            raise SimConfigError(f"agent name {self.name!r} looks like a Herdr pane id; pick a plain name")
        if not isinstance(self.kind, str) or not self.kind:
            raise SimConfigError(f"agent {self.name!r} needs a non-empty kind")
        if self.status not in SCRIPT_STATES:
            raise SimConfigError(f"agent {self.name!r} status must be one of {', '.join(SCRIPT_STATES)}")


@dataclass(frozen=True)
class PaneConfig:
    """A pane; `cwd` defaults to its workspace's directory. With `agent`, an agent runs in it."""

    cwd: Path | None = None
    label: str | None = None
    agent: AgentConfig | None = None


@dataclass(frozen=True)
class TabConfig:
    """A tab; with no panes it gets one shell pane in the workspace directory."""

    label: str | None = None
    panes: tuple[PaneConfig, ...] = ()


@dataclass(frozen=True)
class WorkspaceConfig:
    """A workspace rooted in a real directory; with no tabs it gets one tab with one shell pane."""

    cwd: Path
    label: str | None = None
    tabs: tuple[TabConfig, ...] = ()


@dataclass(frozen=True)
class SimConfig:
    """The whole simulated session and the Herdr version it pretends to be."""

    workspaces: tuple[WorkspaceConfig, ...] = ()
    version: str = ""
    """Reported by ping and snapshot; empty: the version of `protocol` (0.8.2 or 0.9.2)."""
    protocol: int = HERDR_PROTOCOL
    """20 (Herdr 0.8: lifecycle subscribers are replayed the retained events) or 22 (0.9: live only)."""
    time_scale: float = 1.0
    """Multiplies Herdr's own delays and windows (the 300 ms Enter delay after agent.prompt, the
    5 s prompt-effect window, the 100 ms poll interval); script `after_ms` are not scaled."""

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOL_VERSIONS:
            raise SimConfigError(f"protocol must be one of {', '.join(map(str, PROTOCOL_VERSIONS))}")
        if not self.version:
            object.__setattr__(self, "version", PROTOCOL_VERSIONS[self.protocol])
        scale = self.time_scale
        if (
            isinstance(scale, bool)
            or not isinstance(scale, (int, float))
            or not scale > 0
            or scale == float("inf")
        ):
            raise SimConfigError("time_scale must be a number greater than 0")
        names = [
            pane.agent.name for ws in self.workspaces for tab in ws.tabs for pane in tab.panes if pane.agent
        ]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise SimConfigError(f"agent names must be unique; repeated: {', '.join(duplicates)}")

    @classmethod
    def from_dict(cls, raw: object, *, base_dir: Path | None = None) -> SimConfig:
        """Parse the JSON config format; relative `cwd` values are taken from `base_dir`."""
        body = _object(raw, "simulator config", {"workspaces", "version", "protocol", "time_scale"})
        base = base_dir or Path.cwd()
        workspaces = body.get("workspaces", [])
        if not isinstance(workspaces, list):
            raise SimConfigError("`workspaces` must be a list")
        version = body.get("version", "")
        protocol = body.get("protocol", HERDR_PROTOCOL)
        time_scale = body.get("time_scale", 1.0)
        if not isinstance(version, str):
            raise SimConfigError("`version` must be a string")
        if isinstance(protocol, bool) or not isinstance(protocol, int):
            raise SimConfigError("`protocol` must be an integer")
        return cls(tuple(_workspace(item, base) for item in workspaces), version, protocol, time_scale)

    @classmethod
    def from_json_file(cls, path: Path) -> SimConfig:
        """Load a JSON config file; relative `cwd` values are relative to the file's directory."""
        try:
            with Path(path).open("rb") as handle:
                raw = loads_bounded(handle.read(CONFIG_LIMITS.max_bytes + 1), CONFIG_LIMITS, strict=False)
        except OSError as exc:
            raise SimConfigError(f"cannot read simulator config {path}: {exc.strerror or exc}") from None
        except ValueError as exc:  # not UTF-8, not JSON, or past the bounds
            raise SimConfigError(f"simulator config {path} is not valid JSON: {exc}") from None
        return cls.from_dict(raw, base_dir=Path(path).resolve().parent)

    @classmethod
    def for_roots(
        cls, roots: Sequence[Path], *, taken_names: Sequence[str] = (), protocol: int = HERDR_PROTOCOL
    ) -> SimConfig:
        """One workspace per root: a shell pane and a fake agent pane, both in that directory."""
        names = set(taken_names)
        workspaces = []
        for root in roots:
            directory = Path(root).resolve()
            label = directory.name or str(directory)
            name = _unique_name(f"{_agent_name_part(label)}-agent", names)
            agent_pane = PaneConfig(label="agent", agent=AgentConfig(name=name))
            tab = TabConfig(label="main", panes=(PaneConfig(label="shell"), agent_pane))
            workspaces.append(WorkspaceConfig(cwd=directory, label=label, tabs=(tab,)))
        return cls(tuple(workspaces), protocol=protocol)

    def agent_names(self) -> list[str]:
        return [
            pane.agent.name for ws in self.workspaces for tab in ws.tabs for pane in tab.panes if pane.agent
        ]


def _agent_name_part(label: str) -> str:
    """A directory name as the start of a Herdr agent name (lowercase letters, digits, - and _,
    starting with a letter: src/app/agents.rs valid_agent_name)."""
    part = re.sub(r"[^a-z0-9_-]+", "-", label.lower()).strip("-")[:20]
    return part if part[:1].isalpha() else f"a{part}"[:20]


def _unique_name(wanted: str, taken: set[str]) -> str:
    name, counter = wanted, 1
    while name in taken:
        counter += 1
        name = f"{wanted}-{counter}"
    taken.add(name)
    return name


def _object(raw: object, what: str, allowed: set[str]) -> Mapping[str, Any]:
    if not isinstance(raw, dict):
        raise SimConfigError(f"{what} must be a JSON object")
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise SimConfigError(
            f"{what} has unknown keys: {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})"
        )
    return raw


def _optional_str(body: Mapping[str, Any], key: str, what: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise SimConfigError(f"{what} `{key}` must be a string")
    return value


def _path(value: object, base: Path, what: str) -> Path:
    if not isinstance(value, str) or not value:
        raise SimConfigError(f"{what} `cwd` must be a non-empty string")
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _step(raw: object, index: int) -> ScriptStep:
    body = _object(raw, f"script step {index}", {"after_ms", "state", "output", "echo_prompt"})
    echo = body.get("echo_prompt", False)
    if not isinstance(echo, bool):
        raise SimConfigError(f"script step {index} `echo_prompt` must be true or false")
    return ScriptStep(
        after_ms=body.get("after_ms", 0),
        state=_optional_str(body, "state", f"script step {index}"),
        output=_optional_str(body, "output", f"script step {index}"),
        echo_prompt=echo,
    )


def _agent(raw: object) -> AgentConfig:
    body = _object(raw, "agent", {"name", "kind", "status", "script"})
    name = body.get("name")
    if not isinstance(name, str):
        raise SimConfigError("agent `name` must be a string")
    script = AgentScript.from_dict(body["script"]) if "script" in body else AgentScript.default()
    return AgentConfig(
        name=name,
        kind=_optional_str(body, "kind", f"agent {name!r}") or "sim",
        status=_optional_str(body, "status", f"agent {name!r}") or "idle",
        script=script,
    )


def _pane(raw: object, base: Path) -> PaneConfig:
    body = _object(raw, "pane", {"cwd", "label", "agent"})
    return PaneConfig(
        cwd=_path(body["cwd"], base, "pane") if "cwd" in body else None,
        label=_optional_str(body, "label", "pane"),
        agent=_agent(body["agent"]) if body.get("agent") is not None else None,
    )


def _tab(raw: object, base: Path) -> TabConfig:
    body = _object(raw, "tab", {"label", "panes"})
    panes = body.get("panes", [])
    if not isinstance(panes, list):
        raise SimConfigError("tab `panes` must be a list")
    return TabConfig(label=_optional_str(body, "label", "tab"), panes=tuple(_pane(p, base) for p in panes))


def _workspace(raw: object, base: Path) -> WorkspaceConfig:
    body = _object(raw, "workspace", {"cwd", "label", "tabs"})
    if "cwd" not in body:
        raise SimConfigError("every workspace needs a `cwd` (a real directory)")
    tabs = body.get("tabs", [])
    if not isinstance(tabs, list):
        raise SimConfigError("workspace `tabs` must be a list")
    return WorkspaceConfig(
        cwd=_path(body["cwd"], base, "workspace"),
        label=_optional_str(body, "label", "workspace"),
        tabs=tuple(_tab(t, base) for t in tabs),
    )
