// Everything this extension knows about ChatGPT's page, in one place (the site changes its DOM;
// only this module follows it). Each selector accepts the imitation's form
// (tests/fixtures/extension/chatgpt.html) and, where public evidence says the live site differs, the
// live form as well. Evidence (extension/README.md, "Live-site selectors: evidence"):
// - composer `#prompt-textarea` (contenteditable), send `[data-testid="send-button"]`, stop
//   `[data-testid="stop-button"]`: verified (KudoAI/chatgpt.js src/chatgpt.js at 87a115b,
//   2026-08-02, and later third-party adapters). The stop test id `composer-stop-button` and the
//   aria-label forms ("Stop streaming", the composer form's "Stop", "Send prompt", "Send message")
//   are plausible: third-party code from 2026-09 for a composer without test ids.
// - turns: two generations are served at once (third-party notes, live 2026-09-25): the classic
//   `[data-message-author-role][data-message-id]` (verified: pionxzh/chatgpt-exporter src/main.tsx
//   at c397f0d, 2026-08-18), and `li[data-message-role]` whose own `id` is the message id (plausible:
//   KudoAI/chatgpt.js switched to it on 2026-07-23 and restored the classic form beside it on
//   2026-07-25; the `id`, `pending-` ids while streaming, `data-message-streaming` and the content
//   roots `[data-user-message-copy]` / `[data-assistant-markdown]` come from third-party code
//   only). A third "thread" layout (`[data-chatgpt-search-unit-key]`) is reported but NOT read.
// - `[data-testid^="conversation-turn-"]`: verified for the classic generation (pionxzh
//   src/page.ts and src/main.tsx at c397f0d, 2026-08-18); the `li` generation may not carry it (then maxTurnIndex is 0).
// - thread error and Retry: the imitation's `[data-testid="thread-error"]` /
//   `[data-testid="retry-button"]`, and the live `.text-token-text-error` card ("Message delivery
//   timed out. Please try again.") with `button[data-testid="regenerate-thread-error-button"]`:
//   plausible (several independent third-party extensions and tests, 2026; KudoAI/chatgpt.js has
//   `div[class*=text-error]` and `button[data-testid*=regenerate]`).
// - snapshot: `/api/auth/session` -> `accessToken`, then `/backend-api/conversation/<id>` with
//   `current_node` and `mapping`: verified (pionxzh/chatgpt-exporter src/api.ts, 2026-08-18).
// - reply generating: only locale-independent signals (test ids, `data-message-streaming`), never a
//   label: the aria-label forms ("Stop streaming", "Stop") follow the UI language (a Chinese UI
//   shows its own words) and are no longer read. A composer without test ids is then not seen
//   generating; sending still needs ChatGPT's send button, which it does not show while a reply
//   streams, so that fails safe ("busy").
// - tool confirmation card: `[data-testid="tool-approval-card"]` or the older `[role="dialog"]`,
//   with Deny / Allow (earlier "Allow once") / "Always allow": plausible (miuuyy/codex-chatgpt-web
//   pull requests 116, 2026-08-13, and 223, 2026-08-30, from live pages; totec448-spec/
//   chat-on-steroids pull request 349, 2026-09-21; Xeift/CatDesk issue 1, 2026-06-06, reads the
//   connector's name from the card's `img[alt]`). Which card is ours: lib/tool-card.js.

import { normalize, typeInto, waitFor } from "./site-dom.js";
import { cutCodePoints } from "../lib/text.js";
import { mark } from "../lib/trace.js";

export const SELECTORS = Object.freeze({
  composer: "#prompt-textarea",
  send: '[data-testid="send-button"], button[aria-label="Send prompt"], form[data-chatgpt-composer] button[aria-label="Send message"]',
  // Locale-independent only (no aria-label: it is in the UI's language).
  stop: ['[data-testid="stop-button"]', '[data-testid="composer-stop-button"]', 'li[data-message-role="assistant"][data-message-streaming]'].join(", "),
  // The classic generation (and the imitation): one element per message, id in data-message-id.
  turn: "[data-message-author-role]",
  // The newer generation: `li` items of the transcript, id in the element's own `id`.
  listTurn: "li[data-message-role]",
  // Absolute turn numbers (ChatGPT virtualises old turns; the number still says how many there were).
  numberedTurn: '[data-testid^="conversation-turn-"]',
  // A tool confirmation card waiting for the person (see the head of this file); the older
  // imitation names are kept for the pressure signals.
  card: '[data-testid="tool-approval-card"], [role="dialog"], [data-testid="tool-permission-card"], [data-testid="tool-call-card"][data-state="pending"]',
  // The card's own texts are read outside its argument blocks (the model's arguments are no label).
  cardArguments: "pre, code, textarea, [data-tool-arguments]",
});

const CONFIRM_TIMEOUT_MS = 20_000;
const CARD_LABEL_MAX = 120;

/** Tool confirmation cards on the page, each read as lib/tool-card.js wants it. */
export function toolCards() {
  return [...document.querySelectorAll(SELECTORS.card)]
    .filter((element) => element.querySelector("button"))
    .map((element) => {
      const labels = [];
      const walker = document.createTreeWalker(element, NodeFilter.SHOW_ELEMENT);
      for (let node = walker.currentNode; node; node = walker.nextNode()) {
        if (node.closest(SELECTORS.cardArguments) || node.closest("button")) {
          continue;
        }
        if (node.children.length === 0) {
          const text = node.textContent.trim();
          if (text && text.length <= CARD_LABEL_MAX) {
            labels.push(text);
          }
        }
      }
      const images = [...element.querySelectorAll("img[alt]")].map((image) => image.getAttribute("alt"));
      const buttons = [...element.querySelectorAll("button")].filter((button) => !button.disabled);
      return { element, labels, images, buttons: buttons.map((button) => button.textContent.trim()), buttonElements: buttons };
    });
}
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

/**
 * The page's messages in order: `{element, key, role, text}`. The `li[data-message-role]`
 * generation is read when the page has it, else the classic `[data-message-author-role]` one
 * (nested role elements are read once). `key` is "" while ChatGPT shows a temporary `pending-` id.
 */
function turnElements() {
  const list = [...document.querySelectorAll(SELECTORS.listTurn)];
  if (list.length > 0) {
    return list.map((element) => {
      const role = element.getAttribute("data-message-role");
      const id = element.id || "";
      const content = element.querySelector(role === "user" ? "[data-user-message-copy]" : "[data-assistant-markdown]");
      return { element, content: content ?? element, role, key: id.startsWith("pending-") ? "" : id };
    });
  }
  return [...document.querySelectorAll(SELECTORS.turn)]
    .filter((element) => !element.parentElement?.closest(SELECTORS.turn))
    .map((element) => ({
      element,
      content: element,
      role: element.getAttribute("data-message-author-role"),
      key: element.getAttribute("data-message-id") ?? "",
    }));
}

/**
 * A turn's text as a person reads it. ChatGPT puts a code block's chrome inside its `pre` (the
 * language label and the "Copy code" button, in the UI's language, beside the `code` element:
 * "Live-site selectors: evidence"), so a `pre` holding a `code` is read as that code's text alone;
 * everything else is the rendered text (innerText: Markdown syntax gone, HTML in code as text).
 */
export function readableText(element) {
  let text = element.innerText;
  let from = 0;
  for (const pre of element.querySelectorAll("pre")) {
    const code = pre.querySelector("code");
    if (!code) {
      continue;
    }
    const shown = pre.innerText;
    const at = text.indexOf(shown, from);
    if (!shown || at < 0) {
      continue;
    }
    const own = code.innerText.replace(/\n$/, "");
    text = text.slice(0, at) + own + text.slice(at + shown.length);
    from = at + own.length;
  }
  return text.trim();
}

export function turns() {
  return turnElements().map(({ key, role, content }) => ({ key, role, text: readableText(content) }));
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

/**
 * Type `text` into the composer (site-dom.js's typeInto: a textarea through its native value
 * setter, the ProseMirror editor through insertText, as typing does) and click send once it is
 * enabled. The send button, or null when none became usable (the typed text is cleared again).
 */
async function typeAndClick(text) {
  typeInto(composer(), text);
  const button = await waitFor(() => {
    const found = document.querySelector(SELECTORS.send);
    return found && !found.disabled ? found : null;
  }, SEND_BUTTON_TIMEOUT_MS);
  if (!button) {
    clearComposer();
    return null;
  }
  button.click();
  return button;
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
  // The keys only: a turn's text (innerText, a layout of every turn) is not needed to tell a new one.
  const before = new Set(turnElements().map((turn) => turn.key));
  mark("herdr:typing"); // the rest check passed (benchmarks/wake_bench.py)
  if (!(await typeAndClick(text))) {
    return { ok: false, reason: "busy" };
  }
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
  if (!(await typeAndClick(text))) {
    return { typed: false, reason: "no_send_button" };
  }
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

// The thread error and its Retry button: the imitation's names, and the live card
// `.text-token-text-error` with `button[data-testid="regenerate-thread-error-button"]` (plausible,
// third-party evidence only; see the head of this file). An error this adapter does not recognise
// is not seen, and nothing is retried.
const THREAD_ERROR = '[data-testid="thread-error"], .text-token-text-error';
const RETRY = '[data-testid="thread-error"] [data-testid="retry-button"], button[data-testid="regenerate-thread-error-button"]';
const SEND_TIMED_OUT = /timed out|超时/i;

/** The conversation id of /c/<id> or /g/<project>/c/<id>, or null. */
export function conversationId() {
  const match = /\/c\/([^/]+)\/?$/.exec(location.pathname);
  return match ? decodeURIComponent(match[1]) : null;
}

/** `{assistantId, assistantLength, generating}`: what the page shows of the newest assistant message. */
export function assistantView() {
  const last = turnElements().filter((turn) => turn.role === "assistant").at(-1);
  return {
    assistantId: last?.key || null,
    assistantLength: last ? last.content.textContent.trim().length : 0, // textContent: no layout each tick
    generating: isGenerating(),
  };
}

/** ChatGPT's explicit "message send timed out" thread error `{element, text}` (the newest one), or null. */
export function sendTimedOut() {
  const element = [...document.querySelectorAll(THREAD_ERROR)].filter((candidate) => SEND_TIMED_OUT.test(candidate.innerText)).at(-1);
  return element ? { element, text: cutCodePoints(element.innerText.trim(), 200) } : null;
}

export function retryButton() {
  const button = [...document.querySelectorAll(RETRY)].at(-1);
  return button && !button.disabled ? button : null;
}

/** The id of the newest user turn (to tell one thread error from the next). */
export function lastUserId() {
  return turnElements().filter((turn) => turn.role === "user").at(-1)?.key || null;
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
