// The Control Center's pure rules (unit tested with node --test): the only runtime methods it
// asks for, the request a pinned target makes, and which failures leave a send unconfirmed
// (kept, to be retried with the same idempotency key) rather than refused (dropped).

import { t } from "./i18n.js";

/** The four runtime methods of the Control Center (docs/browser-protocol.md 2); nothing else. */
export const CONTROL_METHODS = Object.freeze(["pane.list", "pane.read", "agent.prompt", "pane.send_input"]);

/** A pane read asks for at most this many lines (the runtime's cap too). */
export const MAX_READ_LINES = 200;
export const DEFAULT_READ_LINES = 80;
export const MAX_PROMPT_CHARS = 16_000;
export const MAX_INPUT_CHARS = 4_000;

/**
 * "Sent, but the answer was lost: it may have been delivered". The link and the Edge say
 * `delivery_unknown`; the runtime said `delivery_uncertain` (issue 23 moves it to
 * `delivery_unknown`). The planes are deployed separately, so an answer may carry either name:
 * both are read as the one code, and the panel shows that code whichever name came.
 */
export const DELIVERY_UNKNOWN = "delivery_unknown";
const SAME_AS = Object.freeze({ delivery_uncertain: DELIVERY_UNKNOWN });

/** An error code as the panel shows it and decides on it (an older name read as today's). */
export function knownCode(code) {
  return Object.hasOwn(SAME_AS, code) ? SAME_AS[code] : code;
}

/**
 * Failures after which the send's outcome is unknown, or nothing was sent and the same key may
 * be used again: the send stays pending and "Retry" repeats it with the same key (the runtime
 * delivers a key at most once). Every other error is a refusal: nothing was sent, the pending
 * send is dropped.
 */
const UNCONFIRMED = new Set([
  "timeout",
  "runtime_unavailable",
  "host_unavailable",
  DELIVERY_UNKNOWN,
  "idempotency_in_flight",
  "idempotency_outcome_unknown",
  "herdr_unavailable",
  "internal_error",
]);

export class ControlError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

export function isControlMethod(method) {
  return CONTROL_METHODS.includes(method);
}

export function keepsPending(code) {
  return UNCONFIRMED.has(knownCode(code));
}

/** A pinned target from a listed pane: what the person saw when pinning (the fence). */
export function pinFromPane(pane, workspaceLabel = null) {
  return {
    pane_id: pane.pane_id,
    workspace_id: pane.workspace_id,
    workspace_label: workspaceLabel,
    label: pane.label ?? null,
    agent: pane.agent ?? null,
    agent_kind: pane.agent_kind ?? null,
  };
}

/** How the pin differs from the pane listed now (null when it still holds what was pinned). */
export function pinDrift(pin, panes) {
  const now = panes.find((pane) => pane.pane_id === pin.pane_id);
  if (!now) {
    return t("ccDriftGone");
  }
  if (now.workspace_id !== pin.workspace_id) {
    return t("ccDriftMoved", now.workspace_id);
  }
  if ((now.agent ?? null) !== (pin.agent ?? null)) {
    return now.agent ? t("ccDriftAgent", now.agent) : t("ccDriftNoAgent");
  }
  return null;
}

/**
 * The request that sends `text` to the pinned target: agent.prompt for an agent, otherwise
 * pane.send_input (one line, typed then Enter). Throws ControlError `invalid_text`.
 */
export function sendRequest(pin, text, key) {
  const trimmed = String(text ?? "").replace(/\s+$/u, "");
  if (!trimmed.trim()) {
    throw new ControlError("invalid_text", t("ccTextEmpty"));
  }
  if (pin.agent) {
    if (trimmed.length > MAX_PROMPT_CHARS) {
      throw new ControlError("invalid_text", t("ccPromptTooLong", MAX_PROMPT_CHARS));
    }
    return {
      method: "agent.prompt",
      body: { pane_id: pin.pane_id, workspace_id: pin.workspace_id, agent: pin.agent, text: trimmed, idempotency_key: key },
    };
  }
  if (/[\r\n]/u.test(trimmed)) {
    throw new ControlError("invalid_text", t("ccOneLine"));
  }
  if (trimmed.length > MAX_INPUT_CHARS) {
    throw new ControlError("invalid_text", t("ccLineTooLong", MAX_INPUT_CHARS));
  }
  return {
    method: "pane.send_input",
    body: { pane_id: pin.pane_id, workspace_id: pin.workspace_id, text: trimmed, idempotency_key: key },
  };
}

/** A new idempotency key for one send (the runtime takes [A-Za-z0-9._:-]{8,128}). */
export function newKey(random = () => crypto.randomUUID()) {
  return `cc-${random()}`;
}

/** A read's line count from the person's input, within 1..MAX_READ_LINES. */
export function readLines(value) {
  const number = Math.trunc(Number(value));
  if (!Number.isFinite(number) || number < 1) {
    return DEFAULT_READ_LINES;
  }
  return Math.min(number, MAX_READ_LINES);
}
