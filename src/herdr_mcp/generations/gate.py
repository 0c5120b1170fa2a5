"""The activation gate: a generation takes traffic only after it proved it is the one we expect.

The gate never starts a process (process creation and traffic activation are separate steps); it
talks to an already running generation over loopback. For a candidate, in this order:

1. `GET /health` answers 200 with a JSON object (`health_unreachable`, `health_http_<N>`,
   `health_malformed`).
2. Its `version` equals `expected_runtime_version` when one is set (`version_mismatch`).
3. A real MCP `initialize` + `tools/list` on `/mcp` with the generation's bearer, size-capped and
   timed (`token_unavailable`, `catalog_timeout`, `catalog_unreachable`, `catalog_http_<N>`,
   `catalog_too_large`, `catalog_malformed`). The `tools` array is kept exactly as served (no
   model parses it, so no field is dropped or defaulted; duplicate keys are `catalog_malformed`).
4. The contract identity of that raw array (JCS-hashed, as `herdr_mcp.contract` hashes the frozen
   catalogs) equals the target: `expected_contract` when registered, else the frozen catalog of
   the epoch the candidate's `/health` declares when this installation has it, else that
   declaration (`missing_tools` when fewer tools are listed than expected, else
   `contract_mismatch`: an extra, missing or changed field anywhere in any tool).
5. Switch `active` in `runtime-status.json` (previous = the old active), then take
   `observation.checks` healthy `/health` answers `interval_ms` apart; the first failure switches
   back to the old active (`rolled_back:<code>`).

Outcomes written to the status file and returned: `activated`, `active_unchanged` (the candidate
is already active and passes 1-4), `candidate_rejected:<code>`, `rolled_back:<code>`
(`rolled_back:activation_interrupted` when a process died mid-observation, see
`recover_interrupted`). The whole activation holds the generations lock, so two never interleave.

Every request goes through `local_client`: the bearer never reaches a proxy named by the
environment, and a proxy that is down does not stop an activation.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx2

from herdr_mcp.contract import ContractError, ContractIdentity, contract_identity, identity_of
from herdr_mcp.generations.control import (
    ControlFile,
    Generation,
    GenerationError,
    GenerationStateError,
    GenerationStatus,
    GenerationStore,
    StatusFile,
    Validation,
    parse_contract,
)
from herdr_mcp.generations.migrated import check_activation_target
from herdr_mcp.layout import Layout
from herdr_mcp.local_http import local_client
from herdr_mcp.strict_json import JsonLimits, loads_bounded
from herdr_mcp.tokens import TokenFileError, read_token

#: /health is local and answers without touching Herdr for long (the runtime caps its ping at 1 s).
HEALTH_TIMEOUT_S = 3.0
#: A /health body is a few hundred bytes.
MAX_HEALTH_BYTES = 64 * 1024
#: Listing 18 tools takes milliseconds; a generation slower than this is not fit for traffic.
CATALOG_TIMEOUT_S = 10.0
#: The original's cap on a tools/list answer (our epoch-5 catalog is ~40 KiB).
MAX_CATALOG_BYTES = 2 * 1024 * 1024
#: What the gate reads of a candidate's answers (docs/runtime.md "Parse boundaries"): the
#: frozen catalog of 18 tools holds about 2,000 items, /health about 40.
CATALOG_LIMITS = JsonLimits(max_bytes=MAX_CATALOG_BYTES, max_items=50_000)
HEALTH_LIMITS = JsonLimits(max_bytes=MAX_HEALTH_BYTES, max_items=2_000)
#: A paginated catalog longer than this is refused as malformed.
MAX_CATALOG_PAGES = 8
MCP_PROTOCOL_VERSION = "2025-06-18"

#: The status outcome while a switched-to candidate is being observed; left behind only when the
#: activating process died, which `recover_interrupted` repairs.
OBSERVING = "observing"

TokenReader = Callable[[Generation], str]


@dataclass(frozen=True)
class ActivationResult:
    """What an activation did: the outcome code and the pointers after it."""

    outcome: str
    generation: str
    active: str | None
    previous: str | None
    message: str
    validation: Validation | None = None

    @property
    def ok(self) -> bool:
        return self.outcome in ("activated", "active_unchanged")

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "generation": self.generation,
            "active": self.active,
            "previous": self.previous,
            "message": self.message,
            "validation": None if self.validation is None else self.validation.to_dict(),
        }


class _Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def default_token_reader(store: GenerationStore) -> TokenReader:
    """Read a generation's bearer from its `token_file`, else from `<state dir>/../token`.

    The default state dir is `<config dir>/generations`, so by default every generation uses the
    token of the shared config dir (the one `herdr-mcp serve` creates). A generation started with
    its own `--config-dir` is registered with `token_file` pointing into it. The token is read
    when needed and never written to the control or status files.
    """

    def read(spec: Generation) -> str:
        path = Path(spec.token_file) if spec.token_file else Layout(store.state_dir.parent).token_file
        return read_token_file(path)

    return read


def read_token_file(path: Path) -> str:
    """The token in `path` (0600, a regular file); `GenerationStateError("token_unavailable")` else."""
    try:
        return read_token(path)
    except TokenFileError as exc:
        raise GenerationStateError(exc.code, exc.message) from exc


# -- probing one generation --------------------------------------------------------------------


def _read_capped(response: httpx2.Response, cap: int, code: str) -> bytes:
    body = bytearray()
    for chunk in response.iter_bytes():
        body.extend(chunk)
        if len(body) > cap:
            raise _Refused(code, f"answer larger than {cap} bytes")
    return bytes(body)


def _check_health(spec: Generation) -> dict[str, Any]:
    """Steps 1-2: the generation's /health document; raises `_Refused` with the failing code."""
    try:
        with (
            local_client(timeout=HEALTH_TIMEOUT_S) as http,
            http.stream("GET", f"{spec.endpoint}/health") as response,
        ):
            if response.status_code != 200:
                raise _Refused(f"health_http_{response.status_code}", f"{spec.endpoint}/health answered HTTP")
            body = _read_capped(response, MAX_HEALTH_BYTES, "health_malformed")
    except httpx2.HTTPError as exc:
        raise _Refused("health_unreachable", f"{spec.endpoint}/health: {type(exc).__name__}") from exc
    try:
        health = loads_bounded(body, HEALTH_LIMITS, strict=False)
    except ValueError as exc:  # not JSON, or past the bounds
        raise _Refused("health_malformed", "/health did not answer JSON") from exc
    if (
        not isinstance(health, dict)
        or health.get("status") != "ok"
        or not isinstance(health.get("version"), str)
    ):
        raise _Refused("health_malformed", "/health did not answer {status: ok, version, ...}")
    expected = spec.expected_runtime_version
    if expected is not None and health["version"] != expected:
        raise _Refused("version_mismatch", f"runs version {health['version']}, expected {expected}")
    return health


class _McpSession:
    """A minimal Streamable HTTP MCP client: enough for initialize + tools/list, byte-capped."""

    def __init__(self, http: httpx2.Client, url: str, token: str) -> None:
        self._http = http
        self._url = url
        self._headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        self.budget = MAX_CATALOG_BYTES

    def request(self, request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        with self._http.stream("POST", self._url, json=message, headers=self._headers) as response:
            if response.status_code != 200:
                raise _Refused(f"catalog_http_{response.status_code}", f"{method} answered HTTP")
            session = response.headers.get("mcp-session-id")
            if session:
                self._headers["mcp-session-id"] = session
            body = _read_capped(response, self.budget, "catalog_too_large")
            self.budget -= len(body)
            kind = response.headers.get("content-type", "")
        return _find_response(body, request_id, event_stream=kind.startswith("text/event-stream"))

    def notify(self, method: str) -> None:
        message = {"jsonrpc": "2.0", "method": method}
        response = self._http.post(self._url, json=message, headers=self._headers)
        if response.status_code not in (200, 202):
            raise _Refused(f"catalog_http_{response.status_code}", f"{method} answered HTTP")

    def close(self) -> None:
        if "mcp-session-id" in self._headers:
            try:
                self._http.delete(self._url, headers=self._headers)
            except httpx2.HTTPError:
                # Ending the session is a courtesy; the server expires it anyway.
                return


def _find_response(body: bytes, request_id: int, *, event_stream: bool) -> dict[str, Any]:
    candidates: list[object] = []
    try:
        if event_stream:
            for line in body.decode("utf-8").splitlines():
                if line.startswith("data:"):
                    candidates.append(_strict_json(line[5:]))
        else:
            candidates.append(_strict_json(body.decode("utf-8")))
    except ValueError as exc:
        raise _Refused("catalog_malformed", "the MCP answer is not JSON") from exc
    for item in candidates:
        if isinstance(item, dict) and item.get("id") == request_id:
            result = item.get("result")
            if isinstance(result, dict):
                return result
            raise _Refused("catalog_malformed", f"the MCP request failed: {item.get('error')!r}")
    raise _Refused("catalog_malformed", "no answer to the MCP request")


def _strict_json(text: str) -> object:
    """JSON with every key once and no NaN/Infinity (two readings of one answer must not
    differ), within `CATALOG_LIMITS`."""
    return loads_bounded(text, CATALOG_LIMITS)


def _list_tools(spec: Generation, token: str) -> list[dict[str, Any]]:
    """Step 3: the `tools` array exactly as the generation serves it, all pages concatenated."""
    tools: list[dict[str, Any]] = []
    try:
        with local_client(timeout=CATALOG_TIMEOUT_S) as http:
            session = _McpSession(http, f"{spec.endpoint}/mcp", token)
            try:
                session.request(
                    1,
                    "initialize",
                    {
                        "protocolVersion": MCP_PROTOCOL_VERSION,
                        "capabilities": {},
                        "clientInfo": {"name": "herdr-mcp-generation-gate", "version": "1"},
                    },
                )
                session.notify("notifications/initialized")
                cursor: str | None = None
                for page in range(MAX_CATALOG_PAGES):
                    params = {} if cursor is None else {"cursor": cursor}
                    listed = session.request(2 + page, "tools/list", params)
                    served = listed.get("tools")
                    if not isinstance(served, list) or not all(isinstance(tool, dict) for tool in served):
                        raise _Refused("catalog_malformed", "tools/list did not answer a tool array")
                    tools.extend(served)
                    cursor = listed.get("nextCursor")
                    if cursor is None:
                        return tools
                    if not isinstance(cursor, str):
                        raise _Refused(
                            "catalog_malformed", "tools/list answered a nextCursor that is no string"
                        )
                raise _Refused("catalog_malformed", f"tools/list has more than {MAX_CATALOG_PAGES} pages")
            finally:
                session.close()
    except httpx2.TimeoutException as exc:
        raise _Refused("catalog_timeout", f"tools/list took longer than {CATALOG_TIMEOUT_S} s") from exc
    except httpx2.HTTPError as exc:
        raise _Refused("catalog_unreachable", f"{spec.endpoint}/mcp: {type(exc).__name__}") from exc


def validate(spec: Generation, token_reader: TokenReader) -> Validation:
    """Steps 1-4 for `spec`: `Validation(ok=True, ...)`, or `ok=False` with the failing code."""
    runtime_version: str | None = None
    try:
        health = _check_health(spec)
        runtime_version = health["version"]
        expected = spec.expected_contract or _frozen_or_declared(_declared_contract(health))
        try:
            token = token_reader(spec)
        except GenerationError as exc:
            raise _Refused(exc.code, exc.message) from exc
        tools = _list_tools(spec, token)
        try:
            served = identity_of(tools, expected.epoch)
        except (ContractError, ValueError) as exc:  # JCS refuses lone surrogates, ints beyond 2**53
            raise _Refused("catalog_malformed", str(exc)) from exc
    except _Refused as exc:
        return Validation(ok=False, code=exc.code, runtime_version=runtime_version)
    found = Validation(
        ok=True, runtime_version=runtime_version, contract_hash=served.hash, tool_count=served.tool_count
    )
    if served.tool_count < expected.tool_count:
        return replace(found, ok=False, code="missing_tools")
    if served != expected:
        return replace(found, ok=False, code="contract_mismatch")
    return found


def _frozen_or_declared(declared: ContractIdentity) -> ContractIdentity:
    """The frozen catalog's identity of the declared epoch when we have it: an epoch's catalog
    never changes, so a candidate may not redefine one we know, even consistently."""
    try:
        return contract_identity(declared.epoch)
    except ContractError:
        return declared


def _declared_contract(health: dict[str, Any]) -> ContractIdentity:
    try:
        return parse_contract(health.get("contract"), "/health contract")
    except ValueError as exc:
        raise _Refused("health_malformed", "/health declares no contract {epoch, hash, tool_count}") from exc


def observe_once(spec: Generation) -> str | None:
    """One observation: None when healthy (and still the expected version), else the code."""
    try:
        _check_health(spec)
    except _Refused as exc:
        return exc.code
    return None


# -- the transition ----------------------------------------------------------------------------

_MESSAGES = {
    "health_unreachable": "its /health does not answer; is the generation's process running on that port?",
    "version_mismatch": "it runs another version than the one registered; re-register or restart it",
    "contract_mismatch": "its tool catalog is not the expected contract; it was built for another release",
    "missing_tools": "it serves fewer tools than the expected contract; it was built for another release",
    "token_unavailable": "its bearer token cannot be read; register it with the right token file",
}


def _explain(outcome: str, generation: str) -> str:
    code = outcome.split(":", 1)[-1]
    if outcome == "activated":
        return f"generation {generation} is active"
    if outcome == "active_unchanged":
        return f"generation {generation} was already active and is healthy"
    reason = _MESSAGES.get(code, "see `herdr-mcp generation status` for its validation")
    if outcome.startswith("rolled_back:"):
        return f"generation {generation} failed an observation after the switch; switched back: {reason}"
    return f"generation {generation} was not activated: {reason}"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def activate(
    store: GenerationStore,
    generation: str,
    *,
    token_reader: TokenReader | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> ActivationResult:
    """Make `generation` the active one through the gate (module docstring).

    Records the request as `desired_active` (a new control revision) and the outcome in the status
    file. A refusal or a rollback is a result, not an exception. Raises `GenerationError` only when
    the request itself is unusable: `generation_unknown`, `control_invalid`, `status_invalid`,
    `control_locked`.
    """
    reader = token_reader or default_token_reader(store)
    with store.locked():
        _recover_locked(store)
        return _activate_locked(store, generation, reader, sleep)


def rollback(
    store: GenerationStore,
    *,
    token_reader: TokenReader | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> ActivationResult:
    """Re-activate the previous generation through the same gate.

    Raises what `activate` raises, and `GenerationError("no_previous_generation")` when there is
    no previous generation.
    """
    reader = token_reader or default_token_reader(store)
    with store.locked():
        _recover_locked(store)
        previous = store.read_status().previous
        if previous is None:
            raise GenerationError(
                "no_previous_generation",
                "no generation was active before this one; use `generation activate`",
            )
        return _activate_locked(store, previous, reader, sleep)


def recover_interrupted(store: GenerationStore) -> StatusFile | None:
    """Undo a switch whose observation never finished (the activating process died).

    The status file then still says `outcome: observing` with the unproven candidate active: put
    the generation that was active before it back (`rolled_back:activation_interrupted`). The
    generation that was previous before that switch is not recorded, so `previous` becomes empty.
    Returns the repaired status, or None when nothing was interrupted. Whoever follows the status
    file (the link, a service start) should call this first; `activate` and `rollback` do.
    """
    with store.locked():
        return _recover_locked(store)


def recover_abandoned(store: GenerationStore) -> StatusFile | None:
    """`recover_interrupted`, but only when no activator holds the lock right now; never waits.

    The gate holds the generations lock for a whole activation, observation included, so a free
    lock while the status says `observing` proves the activator died. Returns the repaired status,
    or None (nothing interrupted, or a live activator holds the lock). For readers that must not
    block: the link, `generation up`.
    """
    try:
        with store.locked(timeout_s=0):
            return _recover_locked(store)
    except GenerationError as exc:
        if exc.code == "control_locked":
            return None
        raise


def _recover_locked(store: GenerationStore) -> StatusFile | None:
    status = store.read_status()
    if status.outcome != OBSERVING or status.active is None:
        return None
    candidate = status.status_of(status.active)
    failed = replace(candidate.validation or Validation(ok=False), ok=False, code="activation_interrupted")
    back = replace(
        status,
        active=status.previous,
        previous=None,
        transition_seq=status.transition_seq + 1,
        last_transition=_now(),
        outcome="rolled_back:activation_interrupted",
    ).with_generation(GenerationStatus(candidate.generation, "failed", failed))
    if status.previous is not None:
        back = back.with_generation(replace(back.status_of(status.previous), phase="active"))
    store.write_status_locked(back)
    return back


def _activate_locked(
    store: GenerationStore, generation: str, reader: TokenReader, sleep: Callable[[float], None]
) -> ActivationResult:
    control = store.read_control()
    spec = control.find(generation)
    # A generation from before a major migration cannot open the migrated state.db.
    check_activation_target(store.state_dir.parent, generation)
    if control.desired_active != generation:
        control = store.write_control_locked(
            replace(control, desired_active=generation), expected_revision=control.revision
        )
    return _transition(store, control, store.read_status(), spec, reader, sleep)


def _transition(
    store: GenerationStore,
    control: ControlFile,
    status: StatusFile,
    spec: Generation,
    reader: TokenReader,
    sleep: Callable[[float], None],
) -> ActivationResult:
    name = spec.generation

    def finish(state: StatusFile, outcome: str, validation: Validation | None) -> ActivationResult:
        state = replace(state, processed_revision=control.revision, outcome=outcome)
        store.write_status_locked(state)
        return ActivationResult(
            outcome, name, state.active, state.previous, _explain(outcome, name), validation
        )

    validation = validate(spec, reader)
    if not validation.ok:
        entry = GenerationStatus(name, "active" if status.active == name else "rejected", validation)
        return finish(status.with_generation(entry), f"candidate_rejected:{validation.code}", validation)
    if status.active == name:
        return finish(
            status.with_generation(GenerationStatus(name, "active", validation)),
            "active_unchanged",
            validation,
        )

    before = status
    switched = replace(
        status,
        active=name,
        previous=status.active,
        transition_seq=status.transition_seq + 1,
        last_transition=_now(),
    ).with_generation(GenerationStatus(name, "active", validation))
    if status.active is not None:
        switched = switched.with_generation(replace(switched.status_of(status.active), phase="standby"))
    switched = replace(switched, processed_revision=control.revision, outcome=OBSERVING)
    store.write_status_locked(switched)

    for _ in range(control.observation.checks):
        sleep(control.observation.interval_ms / 1000)
        code = observe_once(spec)
        if code is not None:
            failed = replace(validation, ok=False, code=code)
            back = replace(
                switched,
                active=before.active,
                previous=before.previous,
                transition_seq=switched.transition_seq + 1,
                last_transition=_now(),
            ).with_generation(GenerationStatus(name, "failed", failed))
            if before.active is not None:
                back = back.with_generation(replace(back.status_of(before.active), phase="active"))
            return finish(back, f"rolled_back:{code}", failed)
    return finish(replace(switched, last_good=name), "activated", validation)
