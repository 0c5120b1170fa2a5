// Stale-view evidence (seed 000, "页面卡住"), pure: ChatGPT's own conversation snapshot (the
// page's `GET /backend-api/conversation/<id>`: `current_node` and a `mapping` of nodes
// `{id, parent, message: {id, author: {role}, content: {parts | text}, status, create_time,
// update_time}}`, times in epoch seconds) compared with what the DOM shows of the last
// assistant message. Nothing here guesses from elapsed time alone: a snapshot that cannot be
// read, or whose shape is not the expected one, is `unknown`, and the caller does nothing.

export const SERVER_AHEAD = "server_ahead";
export const NOT_ACCEPTED = "not_accepted";
export const STALLED = "stalled";
export const SYNCED = "synced";
export const UNKNOWN = "unknown";

export const DEFAULT_STALLED_AFTER_MS = 120_000;

/** The server's text is "clearly longer" than the page's by more than this (markdown vs rendered text). */
export function lengthSlack(domLength) {
  return Math.max(32, Math.ceil(domLength * 0.1));
}

function textLength(content) {
  if (!content || typeof content !== "object") {
    return null;
  }
  if (Array.isArray(content.parts)) {
    return content.parts.reduce((sum, part) => sum + (typeof part === "string" ? part.length : 0), 0);
  }
  if (typeof content.text === "string") {
    return content.text.length;
  }
  return null;
}

function node(mapping, id) {
  const entry = mapping[id];
  const message = entry?.message;
  if (!entry || typeof entry !== "object" || !message || typeof message !== "object") {
    return null;
  }
  const role = message.author?.role;
  const length = textLength(message.content);
  const time = typeof message.update_time === "number" ? message.update_time : message.create_time;
  if (typeof role !== "string" || length === null || typeof message.status !== "string") {
    return null;
  }
  return {
    id: String(message.id ?? id),
    nodeId: id,
    role,
    length,
    status: message.status,
    finished: message.status.startsWith("finished"),
    updatedAtMs: typeof time === "number" ? time * 1000 : null,
    parent: typeof entry.parent === "string" ? entry.parent : null,
  };
}

/**
 * `{ok: true, current, lastAssistant, ids}` (lastAssistant: the newest assistant message on the
 * current path after its last user message, or null), or `{ok: false, reason}` for anything
 * not shaped like ChatGPT's snapshot.
 */
export function parseSnapshot(raw) {
  if (!raw || typeof raw !== "object" || typeof raw.current_node !== "string") {
    return { ok: false, reason: "no current_node" };
  }
  const mapping = raw.mapping;
  if (!mapping || typeof mapping !== "object") {
    return { ok: false, reason: "no mapping" };
  }
  const current = node(mapping, raw.current_node);
  if (!current) {
    return { ok: false, reason: "current_node is not a readable message" };
  }
  const ids = new Set();
  for (const [key, entry] of Object.entries(mapping)) {
    ids.add(key);
    if (entry?.message?.id) {
      ids.add(String(entry.message.id));
    }
  }
  let lastAssistant = null;
  let cursor = current;
  for (let steps = 0; cursor && cursor.role !== "user" && steps < 1000; steps += 1) {
    if (cursor.role === "assistant" && !lastAssistant) {
      lastAssistant = cursor;
    }
    cursor = cursor.parent ? node(mapping, cursor.parent) : null;
  }
  return { ok: true, current, lastAssistant, ids };
}

/**
 * classify(snapshot, dom, {nowMs, stalledAfterMs}) -> {kind, reason, evidence}
 *   dom: {assistantId (null when the page shows none), assistantLength, generating}
 * kinds: server_ahead (reload once), not_accepted (ChatGPT's Retry once), stalled (wait, then
 * reload once), synced (nothing), unknown (fail closed).
 */
export function classify(raw, dom, { nowMs, stalledAfterMs = DEFAULT_STALLED_AFTER_MS } = {}) {
  const snap = parseSnapshot(raw);
  if (!snap.ok) {
    return { kind: UNKNOWN, reason: snap.reason, evidence: { dom } };
  }
  const { current, lastAssistant } = snap;
  const evidence = {
    dom,
    server: { currentNode: current.nodeId, role: current.role, status: current.status, length: current.length },
  };
  const age = (message) => (message.updatedAtMs === null ? null : nowMs - message.updatedAtMs);
  if (current.role === "user") {
    if (!dom.generating) {
      return { kind: NOT_ACCEPTED, reason: "current_node is the user's message and nothing is generating", evidence };
    }
    const waited = age(current);
    if (waited === null) {
      return { kind: UNKNOWN, reason: "the user's message has no time", evidence };
    }
    return waited >= stalledAfterMs
      ? { kind: STALLED, reason: "no reply started on the server", evidence }
      : { kind: SYNCED, reason: "the server has not started the reply yet", evidence };
  }
  if (dom.assistantId && !snap.ids.has(dom.assistantId)) {
    return { kind: UNKNOWN, reason: "the page's last assistant message is not in the snapshot", evidence };
  }
  const target = lastAssistant ?? current;
  evidence.server = { ...evidence.server, messageId: target.id, messageStatus: target.status, messageLength: target.length };
  if (target.id !== dom.assistantId) {
    return { kind: SERVER_AHEAD, reason: "the server has a newer message than the page shows", evidence };
  }
  if (target.length > dom.assistantLength + lengthSlack(dom.assistantLength)) {
    return { kind: SERVER_AHEAD, reason: "the server's text of this message is longer", evidence };
  }
  if (target.finished && current.finished) {
    return dom.generating
      ? { kind: SERVER_AHEAD, reason: "finished on the server, still generating on the page", evidence }
      : { kind: SYNCED, reason: "page and server agree and the turn is over", evidence };
  }
  const waited = age(target.finished ? current : target);
  if (waited === null) {
    return { kind: UNKNOWN, reason: "the message in progress has no time", evidence };
  }
  return waited >= stalledAfterMs
    ? { kind: STALLED, reason: "in progress on the server with no update", evidence }
    : { kind: SYNCED, reason: "in progress on the server and the page shows it", evidence };
}

/**
 * ChatGPT's explicit "message send timed out": what was delivered decides, never the error.
 * current_node past the user's message -> reload (the request was delivered: Retry could repeat
 * tool work); still the user's message -> Retry once; no readable snapshot -> one view reload
 * (seed 000: rather a safe view sync than a second user turn). Never a resend.
 */
export function timeoutAction(raw) {
  const snap = parseSnapshot(raw);
  if (!snap.ok) {
    return { action: "reload", kind: UNKNOWN, reason: `delivery unknown (${snap.reason}): view sync only` };
  }
  if (snap.current.role === "user") {
    return { action: "retry", kind: NOT_ACCEPTED, reason: "current_node is still the user's message" };
  }
  return { action: "reload", kind: SERVER_AHEAD, reason: `current_node is already a ${snap.current.role} node: delivered` };
}
