// Everything this extension knows about ChatGPT's page, in one place (the site changes its DOM;
// only this module follows it): the composer `#prompt-textarea` (contenteditable), the send
// button `[data-testid="send-button"]`, the stop button `[data-testid="stop-button"]` shown while
// a reply is generating, and turns `[data-message-author-role]` (with `data-message-id`).

import { normalize, waitFor } from "./site-dom.js";

export const SELECTORS = Object.freeze({
  composer: "#prompt-textarea",
  send: '[data-testid="send-button"]',
  stop: '[data-testid="stop-button"]',
  turn: "[data-message-author-role]",
  // Absolute turn numbers (ChatGPT virtualises old turns; the number still says how many there were).
  numberedTurn: '[data-testid^="conversation-turn-"]',
  // A tool call or permission card waiting for the person. NOT checked against the live site:
  // these are the names this adapter looks for; a card it does not recognise is not seen.
  card: '[data-testid="tool-permission-card"], [data-testid="tool-call-card"][data-state="pending"]',
});

const CONFIRM_TIMEOUT_MS = 20_000;
const SEND_BUTTON_TIMEOUT_MS = 5_000;

export function composer() {
  return document.querySelector(SELECTORS.composer);
}

export function isGenerating() {
  return document.querySelector(SELECTORS.stop) !== null;
}

export function composerText() {
  const element = composer();
  if (!element) {
    return "";
  }
  return ("value" in element && element.tagName === "TEXTAREA" ? element.value : element.innerText).trim();
}

/** Confirmed idle: a composer to type in, no reply generating, and no draft of the person's in it. */
export function isIdle() {
  return composer() !== null && !isGenerating() && composerText() === "";
}

export function turns() {
  return [...document.querySelectorAll(SELECTORS.turn)].map((element) => ({
    key: element.getAttribute("data-message-id") ?? "",
    role: element.getAttribute("data-message-author-role"),
    text: element.innerText.trim(),
  }));
}

export function title() {
  return document.title;
}

export function clearComposer() {
  const element = composer();
  if (!element) {
    return;
  }
  element.focus();
  document.execCommand("selectAll", false);
  document.execCommand("delete", false);
}

function typeInto(element, text) {
  element.focus();
  if (element.tagName === "TEXTAREA") {
    element.value = text;
    element.dispatchEvent(new InputEvent("input", { bubbles: true, inputType: "insertText", data: text }));
    return;
  }
  // The editor (ProseMirror) listens to input events; insertText goes through them as typing does.
  document.execCommand("selectAll", false);
  if (!document.execCommand("insertText", false, text)) {
    element.textContent = text;
    element.dispatchEvent(new InputEvent("input", { bubbles: true, inputType: "insertText", data: text }));
  }
}



/**
 * Type `text` and send it. `{ok: true}` once a new user turn with this text shows in the page;
 * `{ok: false, reason: "busy"}` when the composer is not confirmed idle (nothing typed);
 * `{ok: false, reason: "unconfirmed"}` when it was typed or clicked but no such turn appeared.
 */
export async function send(text) {
  if (!isIdle()) {
    return { ok: false, reason: "busy" };
  }
  const before = new Set(turns().map((turn) => turn.key));
  typeInto(composer(), text);
  const button = await waitFor(() => {
    const found = document.querySelector(SELECTORS.send);
    return found && !found.disabled ? found : null;
  }, SEND_BUTTON_TIMEOUT_MS);
  if (!button) {
    clearComposer();
    return { ok: false, reason: "busy" };
  }
  button.click();
  const wanted = normalize(text);
  const confirmed = await waitFor(
    () => turns().find((turn) => turn.role === "user" && !before.has(turn.key) && normalize(turn.text) === wanted),
    CONFIRM_TIMEOUT_MS,
  );
  return confirmed ? { ok: true } : { ok: false, reason: "unconfirmed" };
}

// ---- handoff (background/handoff.js): the seed into a new conversation, and probes for it

/** A conversation page: /c/<id> or /g/<project>/c/<id> (the new-chat pages are not). */
export function onConversation() {
  return /\/c\/[^/]+\/?$/.test(location.pathname);
}

/** Whether a user turn on the page carries the seed marker (the package message's first line). */
export function hasMarker(marker) {
  return turns().some((turn) => turn.role === "user" && turn.text.includes(marker));
}

/**
 * Type the seed into a new conversation page and send it. `{typed: false, reason}` when nothing
 * was submitted (the composer never became usable within `idleMs`, or no send button appeared:
 * the typed text is cleared again); otherwise `{typed: true, markerSeen}` once the page is on a
 * conversation and shows the marker in a user turn, or when `deadlineMs` passed without that.
 */
export async function submitSeed(text, marker, { idleMs, deadlineMs }) {
  if (!(await waitFor(() => isIdle(), idleMs))) {
    return { typed: false, reason: composer() ? "composer_busy" : "no_composer" };
  }
  typeInto(composer(), text);
  const button = await waitFor(() => {
    const found = document.querySelector(SELECTORS.send);
    return found && !found.disabled ? found : null;
  }, SEND_BUTTON_TIMEOUT_MS);
  if (!button) {
    clearComposer();
    return { typed: false, reason: "no_send_button" };
  }
  button.click();
  const seen = await waitFor(() => onConversation() && hasMarker(marker), deadlineMs);
  return { typed: true, markerSeen: Boolean(seen) };
}

/** Wait up to `deadlineMs` for a user turn with the marker on this conversation page. */
export async function probeMarker(marker, deadlineMs) {
  const seen = await waitFor(() => onConversation() && hasMarker(marker), deadlineMs);
  return { markerSeen: Boolean(seen) };
}

/** What auto rollover needs of the page (lib/rollover.js): turn numbers, streaming, cards, draft. */
export function pressureSignals() {
  let maxTurnIndex = 0;
  for (const element of document.querySelectorAll(SELECTORS.numberedTurn)) {
    const number = Number(element.getAttribute("data-testid").slice("conversation-turn-".length));
    if (Number.isInteger(number) && number > maxTurnIndex) {
      maxTurnIndex = number;
    }
  }
  return {
    maxTurnIndex,
    generating: isGenerating(),
    card: document.querySelector(SELECTORS.card) !== null,
    draft: composerText() !== "",
  };
}

// ---- page health (content/page-health.js): the last assistant message, the thread error and
// its Retry, and the conversation snapshot ChatGPT's own page reads.

// The thread error and its Retry button: NOT checked against the live site (the names the
// imitation in tests/fixtures/extension/chatgpt.html uses); an error this adapter does not
// recognise is not seen, and nothing is retried.
const THREAD_ERROR = '[data-testid="thread-error"]';
const RETRY = '[data-testid="thread-error"] [data-testid="retry-button"]';
const SEND_TIMED_OUT = /timed out|超时/i;

/** The conversation id of /c/<id> or /g/<project>/c/<id>, or null. */
export function conversationId() {
  const match = /\/c\/([^/]+)\/?$/.exec(location.pathname);
  return match ? decodeURIComponent(match[1]) : null;
}

/** `{assistantId, assistantLength, generating}`: what the page shows of the newest assistant message. */
export function assistantView() {
  const elements = document.querySelectorAll('[data-message-author-role="assistant"]');
  const last = elements[elements.length - 1];
  return {
    assistantId: last?.getAttribute("data-message-id") || null,
    assistantLength: last ? last.textContent.trim().length : 0, // textContent: no layout each tick
    generating: isGenerating(),
  };
}

/** ChatGPT's explicit "message send timed out" thread error `{element, text}`, or null. */
export function sendTimedOut() {
  const element = document.querySelector(THREAD_ERROR);
  return element && SEND_TIMED_OUT.test(element.innerText) ? { element, text: element.innerText.trim().slice(0, 200) } : null;
}

export function retryButton() {
  const button = document.querySelector(RETRY);
  return button && !button.disabled ? button : null;
}

/** The id of the newest user turn (to tell one thread error from the next). */
export function lastUserId() {
  const elements = document.querySelectorAll('[data-message-author-role="user"]');
  return elements[elements.length - 1]?.getAttribute("data-message-id") ?? null;
}

async function fetchJson(url, { headers = {}, timeoutMs }) {
  const answer = await fetch(url, { credentials: "include", headers, signal: AbortSignal.timeout(timeoutMs) });
  if (!answer.ok) {
    return { ok: false, reason: `HTTP ${answer.status}` };
  }
  try {
    return { ok: true, json: await answer.json() };
  } catch {
    return { ok: false, reason: "not JSON" };
  }
}

/**
 * The same-origin conversation snapshot, as the page reads it: `GET /api/auth/session` for the
 * page's access token (held only for this request, never stored), then `GET
 * /backend-api/conversation/<id>` with it. `{ok: true, json}` or `{ok: false, reason}` (an HTTP
 * error, a timeout, not JSON): best effort, and the caller fails closed on anything but ok.
 */
export async function readSnapshot(id, timeoutMs) {
  try {
    const headers = {};
    const session = await fetchJson("/api/auth/session", { timeoutMs });
    if (session.ok && typeof session.json?.accessToken === "string") {
      headers.Authorization = `Bearer ${session.json.accessToken}`;
    }
    return await fetchJson(`/backend-api/conversation/${encodeURIComponent(id)}`, { headers, timeoutMs });
  } catch (error) {
    return { ok: false, reason: error?.name === "TimeoutError" ? "timed out" : `failed (${error?.message ?? error})` };
  }
}
