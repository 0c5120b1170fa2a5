// The bridge's content script on chat.z.ai and chat.deepseek.com: watches the conversation
// through the site's adapter, asks the worker to run the tool calls of a finished model reply,
// sends the TOOL_RESULT back into the same conversation, folds protocol messages, and shows the
// extension's HUD (content/hud.js) with a row of its own: the bridge's last action and a button
// that sends the protocol prompt. DOM details live in the adapters.
//
// Identity: the scope is `<site>:conv:<id>` from the route. State made on a root page (no id
// yet) moves once to the first conversation the tab lands on; moving from conversation A to B
// starts B afresh (nothing of A is carried).
//
// Handoff (extension/README.md "Handoff and rollover"): a second port, "bridge-page", is the raw
// channel: the page's URL, its finalized turns for the continuity journal, the HUD's Hand off,
// and the worker's `handoff.seed` / `handoff.probe`. The seed is typed as a plain message, never
// through the JSON bridge (seed 002: a conversation-control message, not a coding task), and a
// reply to a seed is never run as tool calls.
//
// Continuity (as on ChatGPT): a conversation bound to a workspace gets the person's queue, the
// settle wake, progress and the Auto switch over the same raw channel. The worker sends only
// into a conversation at rest, which here means: composer empty, no reply generating, the
// bridge neither running calls nor holding a result to deliver, no seed being typed, and no
// message of ours still waiting for its reply (up to REPLY_WAIT_MS). A "send" that arrives when
// the conversation is not at rest is answered "busy" with nothing typed.

import { Hud } from "./hud.js";
import { normalize, showRest, typeInto, valueOf, waitFor } from "./site-dom.js";
import { t } from "../lib/i18n.js";
import { hasContext, isCallsOnly, isPrompt, isResult, MAX_ROUNDS, messageAnchor, messageKey, parseCalls, roundsUsed } from "../lib/bridge-protocol.js";

const CHECK_DELAY_MS = 150;
/**
 * A reply holding calls (or malformed calls) is acted on only once its text and code blocks have
 * stayed unchanged this long with no generating signal: the second signal behind each site's
 * "generating" selectors, several of which have thin or no public evidence (zai-dom.js,
 * deepseek-dom.js). Only the bridge's run waits for it; the rest check before a wake does not.
 */
const QUIET_MS = 1_200;
const URL_POLL_MS = 300;
const RECONNECT_MS = 1_000;
/** How long a last user message counts as awaiting its reply (after that the page is at rest). */
const REPLY_WAIT_MS = 30_000;

let adapter = null;
let port = null;
let nextId = 1;
const waiting = new Map();
let state = null;
let busy = false;
let hud = null;
let pagePort = null;
let lastUrl = null;
let reportedTurns = "";
let lastBound = null;
/** True while a continuity message (queue, wake, progress, continue) is typed here. */
let sending = false;
/** The conversation at rest, as last reported to the worker (null: report again). */
let lastIdle = null;
/** `{count, since}`: the message count when a last user message was first seen, and when. */
let awaiting = null;
/** True while a handoff seed is typed and watched here: the bridge acts on nothing meanwhile. */
let seeding = false;
/** The seeds typed in this page's life, normalized: a page may show one without its marker line. */
const seeded = [];
/** state/handoff.py SEED_MARKER: every handoff message's first line starts with it. */
const HANDOFF_MARKER = "[herdr-handoff";

function freshState(convId) {
  // sawLive: a reply was seen generating (or we sent something) in this page life; until then a
  // reply with calls is one that was there at load, and the reload rule applies to it.
  // settle: the last reply's content signature and when it was first seen as it is (QUIET_MS).
  return { convId, handled: new Set(), pending: null, sawLive: false, note: "", settle: null, settleTimer: null };
}

/**
 * True once the last reply's content (`signature`) has stayed the same for QUIET_MS; until then a
 * check is scheduled for when the quiet period ends (a page may not change again by itself).
 */
function quietFor(signature) {
  const now = Date.now();
  if (state.settle?.signature !== signature) {
    state.settle = { signature, since: now };
  }
  const left = state.settle.since + QUIET_MS - now;
  if (left <= 0) {
    return true;
  }
  clearTimeout(state.settleTimer);
  state.settleTimer = setTimeout(check, left + 20);
  return false;
}

export async function start() {
  if (document.querySelector("herdr-bridge-hud")) {
    return;
  }
  const module =
    location.hostname === "chat.z.ai" ? await import("./zai-dom.js") : location.hostname === "chat.deepseek.com" ? await import("./deepseek-dom.js") : null;
  if (!module) {
    return;
  }
  adapter = module.adapter;
  state = freshState(adapter.conversationId());
  hud = new Hud({
    tag: "herdr-bridge-hud",
    onContinue: () => postPage({ type: "continue" }),
    onCheck: () => postPage({ type: "check" }),
    onAuto: (on) => postPage({ type: "auto.set", on }),
    onQueue: () => queueComposer(),
    onClearQueue: () => postPage({ type: "queue.clear" }),
    onHandoff: (action) => postPage({ type: action === "resume" ? "handoff.resume" : "handoff.start" }),
    bridge: { onStart: () => sendPrompt() },
  });
  installFoldStyle();
  connect();
  connectPage();
  let pending = false;
  new MutationObserver(() => {
    // The rest report follows the page as it changes; the bridge's own check runs at most every
    // CHECK_DELAY_MS (it reads every message).
    reportRest();
    if (!pending) {
      pending = true;
      setTimeout(() => {
        pending = false;
        check();
      }, CHECK_DELAY_MS);
    }
  }).observe(document.documentElement, { childList: true, subtree: true, characterData: true, attributes: true });
  setInterval(check, URL_POLL_MS);
  check();
}

function connect() {
  port = chrome.runtime.connect({ name: "bridge" });
  port.onMessage.addListener((message) => {
    const found = waiting.get(message.id);
    if (found) {
      waiting.delete(message.id);
      if (message.ok) {
        found.resolve(message.result);
      } else {
        found.reject(Object.assign(new Error(message.error?.message ?? "failed"), { code: message.error?.code }));
      }
    }
  });
  port.onDisconnect.addListener(() => {
    port = null;
    for (const { reject } of waiting.values()) {
      reject(Object.assign(new Error(t("bridgeWorkerGone")), { code: "worker_gone" }));
    }
    waiting.clear();
    setTimeout(connect, RECONNECT_MS);
  });
}

function connectPage() {
  pagePort = chrome.runtime.connect({ name: "bridge-page" });
  pagePort.onMessage.addListener((message) => pageMessage(message));
  pagePort.onDisconnect.addListener(() => {
    pagePort = null;
    setTimeout(connectPage, RECONNECT_MS);
  });
  announce();
}

function postPage(message) {
  try {
    pagePort?.postMessage(message);
  } catch {
    // disconnected; the reconnect announces the page again
  }
}

function announce() {
  lastUrl = location.href;
  reportedTurns = "";
  lastIdle = atRest();
  postPage({ type: "page", url: location.href, idle: lastIdle });
  showRest(lastIdle);
}

function pageMessage(message) {
  if (message.type === "hud") {
    const bound = message.state?.binding?.workspace_id ?? null;
    if (bound && !lastBound) {
      reportedTurns = ""; // bound just now: the journal gets the turns already on the page
    }
    lastBound = bound;
    hud.render(message.state);
  } else if (message.type === "send") {
    continuitySend(message);
  } else if (message.type === "queued") {
    const composer = adapter.composer();
    if (composer) {
      typeInto(composer, ""); // the queued text leaves the composer, as on ChatGPT
    }
  } else if (message.type === "handoff.seed" || message.type === "handoff.probe") {
    handoffRequest(message);
  } else if (message.type === "error") {
    hud.flash(`${message.code}: ${message.message}`);
  }
}

/**
 * The conversation is at rest: the worker may type into it (see the head of this file). A last
 * user message (ours or the person's) awaits its reply for up to REPLY_WAIT_MS; a reply that never
 * comes does not hold the conversation for ever.
 */
function atRest() {
  if (busy || seeding || sending || state?.pending || !adapter.isIdle()) {
    return false;
  }
  const messages = adapter.messages();
  if (messages.at(-1)?.role !== "user") {
    awaiting = null;
    return true;
  }
  if (awaiting?.count !== messages.length) {
    awaiting = { count: messages.length, since: Date.now() };
  }
  return Date.now() - awaiting.since > REPLY_WAIT_MS;
}

function reportRest() {
  const idle = atRest();
  if (idle !== lastIdle) {
    lastIdle = idle;
    postPage({ type: "composer", idle, focused: document.hasFocus() });
    showRest(idle);
  }
}

/** The worker's continuity message: typed only into a conversation at rest, else "busy". */
async function continuitySend(message) {
  let result;
  if (!atRest()) {
    result = { ok: false, reason: "busy" };
  } else {
    sending = true;
    state.sawLive = true; // a reply to what we send is a live one (the bridge may run its calls)
    try {
      result = await adapter.send(message.text);
    } catch (error) {
      result = { ok: false, reason: "unconfirmed", detail: String(error) };
    } finally {
      sending = false;
    }
  }
  postPage({ type: "sent", id: message.id, ...result });
  lastIdle = null;
  check();
}

function queueComposer() {
  const text = valueOf(adapter.composer());
  if (!text) {
    hud.flash(t("hudQueueEmpty"));
    return;
  }
  postPage({ type: "queue.add", text });
}

const hasMarker = (marker) =>
  adapter.messages().some((message) => message.role === "user" && normalize(message.text).startsWith(normalize(marker)));

/**
 * The worker's handoff requests: type the seed as a plain message (the raw channel) and wait for
 * this page to be on a conversation with a user message starting with the marker; or only look
 * for the marker. `{typed: false, reason}` when nothing was submitted.
 */
async function handoffRequest(message) {
  let result;
  if (message.type === "handoff.seed") {
    seeding = true;
    try {
      if (!(await waitFor(() => adapter.isIdle(), message.idleMs))) {
        result = { typed: false, reason: adapter.composer() ? "composer_busy" : "no_composer" };
      } else {
        seeded.push(normalize(message.text));
        // Confirmed by the marker below (a page may show the seed without it), not by its text.
        const sent = await adapter.send(message.text, { confirmMs: 0 });
        if (!sent.ok && sent.reason === "busy") {
          result = { typed: false, reason: "no_send_button" };
        } else {
          const seen = await waitFor(() => adapter.conversationId() && hasMarker(message.marker), message.deadlineMs);
          result = { typed: true, markerSeen: Boolean(seen) };
        }
      }
    } catch (error) {
      result = { typed: true, markerSeen: false, detail: String(error) }; // typing may have begun
    } finally {
      seeding = false;
    }
  } else {
    const seen = await waitFor(() => adapter.conversationId() && hasMarker(message.marker), message.deadlineMs);
    result = { markerSeen: Boolean(seen) };
  }
  postPage({ type: message.type === "handoff.seed" ? "handoff.seeded" : "handoff.probed", id: message.id, url: location.href, ...result });
  if (location.href !== lastUrl) {
    announce();
  }
}

/** The text of the person's (or a seed's) message `last` answers, or "". */
function askedBy(messages, index) {
  for (let at = index - 1; at >= 0; at -= 1) {
    if (messages[at].role === "user") {
      return messages[at].text;
    }
  }
  return "";
}

/** The conversation's finalized turns (protocol messages left out) for the continuity journal. */
async function reportTurns(messages) {
  const turns = [];
  for (const [index, message] of messages.entries()) {
    const protocol = message.role === "user" ? isPrompt(message.text) || isResult(message.text) : isCallsOnly(message.text, message.code);
    if (!protocol && message.text) {
      turns.push({ key: `${adapter.name}-${await messageKey(scope(), messageAnchor(messages, index), message.text)}`, role: message.role, text: message.text });
    }
  }
  const signature = turns.map((turn) => turn.key).join(" ");
  if (turns.length > 0 && signature !== reportedTurns) {
    reportedTurns = signature;
    postPage({ type: "turns", turns, title: document.title });
  }
}

function ask(message) {
  return new Promise((resolve, reject) => {
    if (!port) {
      reject(Object.assign(new Error(t("bridgeNotConnected")), { code: "worker_gone" }));
      return;
    }
    const id = nextId++;
    waiting.set(id, { resolve, reject });
    port.postMessage({ ...message, id });
  });
}

function scope() {
  return state.convId ? `${adapter.name}:conv:${state.convId}` : null;
}

function follow() {
  const convId = adapter.conversationId();
  if (convId === state.convId) {
    return;
  }
  if (state.convId === null && !state.migrated) {
    // the root page's state moves, once, to the conversation the tab landed on
    state.convId = convId;
    state.migrated = true;
  } else {
    state = freshState(convId);
  }
}

async function check() {
  if (!adapter) {
    return;
  }
  try {
    await checkOnce();
  } finally {
    reportRest();
  }
}

async function checkOnce() {
  fold(adapter.messages());
  if (location.href !== lastUrl && pagePort) {
    announce();
  }
  if (busy || seeding || sending) {
    return;
  }
  follow();
  const messages = adapter.messages();
  if (adapter.isGenerating()) {
    state.sawLive = true;
    return;
  }
  render();
  if (!scope()) {
    return; // a root page: nothing runs before the conversation has its id
  }
  busy = true;
  try {
    await reportTurns(messages);
    if (state.pending) {
      await deliver();
      return;
    }
    const last = messages.at(-1);
    const parsed = last?.role === "assistant" ? parseCalls(last.text, last.code) : null;
    if (!parsed || parsed.calls.length + parsed.errors.length === 0) {
      return;
    }
    if (!quietFor(`${last.text}\u0000${(last.code ?? []).join("\u0000")}`)) {
      return; // the reply may still be streaming: act once it has been still for QUIET_MS
    }
    const asked = askedBy(messages, messages.length - 1);
    if (asked.startsWith(HANDOFF_MARKER) || (asked && seeded.some((seed) => seed.includes(normalize(asked))))) {
      document.documentElement.dataset.herdrBridgeLast = "skipped: a reply to a handoff seed is not a tool call";
      setNote(t("bridgeSeedReply"));
      return;
    }
    const key = await messageKey(scope(), messageAnchor(messages, messages.length - 1), last.text);
    if (state.handled.has(key)) {
      return;
    }
    state.handled.add(key);
    const plain = messages.map((message) => ({ role: message.role, text: message.text, code: message.code ?? [] }));
    if (!state.sawLive && !hasContext(plain)) {
      document.documentElement.dataset.herdrBridgeLast = "skipped: no protocol context in this conversation";
      setNote(t("bridgeNoContext"));
      return;
    }
    if (roundsUsed(plain) >= MAX_ROUNDS) {
      setNote(t("bridgeRoundsUsed", MAX_ROUNDS));
      return;
    }
    setNote(t("bridgeRunning"));
    const answer = await ask({ type: "run", scope: scope(), key, text: last.text, code: last.code ?? [], messages: plain, recovering: !state.sawLive });
    document.documentElement.dataset.herdrBridgeLast = `${answer.status}: ${answer.reason}`;
    if (answer.text) {
      state.pending = { key, text: answer.text, scope: scope() };
      setNote(answer.status === "stored" ? t("bridgeSendingKept") : answer.reason === "in parallel" ? t("bridgeRanParallel") : t("bridgeRanInOrder"));
      await deliver();
    } else {
      setNote(t("bridgeNotRun", answer.reason));
    }
  } catch (error) {
    setNote(t("bridgeError", error.code ?? "failed", error.message));
  } finally {
    busy = false;
  }
}

async function deliver() {
  const pending = state.pending;
  if (!adapter.isIdle()) {
    return; // the person's draft or a reply in the way; tried again on the next change
  }
  state.sawLive = true;
  const sent = await adapter.send(pending.text);
  if (sent.ok) {
    if (state.pending === pending) {
      state.pending = null;
    }
    setNote(t("bridgeResultSent"));
    await ask({ type: "delivered", scope: pending.scope, key: pending.key }).catch(() => {});
  } else if (sent.reason === "unconfirmed") {
    state.pending = null; // typed and clicked but not seen: never typed twice; the page decides
    setNote(t("bridgeResultUnconfirmed"));
  }
}

async function sendPrompt() {
  try {
    setNote(t("bridgeReadingTools"));
    const { text } = await ask({ type: "prompt" });
    state.sawLive = true;
    const sent = await adapter.send(text);
    setNote(sent.ok ? t("bridgePromptSent") : t("bridgePromptNotSent", sent.reason));
  } catch (error) {
    setNote(t("bridgeError", error.code ?? "failed", error.message));
  }
}

function fold(messages) {
  for (const message of messages) {
    if (message.element.dataset.herdrFold) {
      continue; // folded already (or opened by the person)
    }
    const protocol = message.role === "user" ? isPrompt(message.text) || isResult(message.text) : isCallsOnly(message.text, message.code);
    if (protocol) {
      message.element.dataset.herdrFold = "closed";
      message.element.addEventListener("click", () => {
        message.element.dataset.herdrFold = message.element.dataset.herdrFold === "closed" ? "open" : "closed";
      });
    }
  }
}

function installFoldStyle() {
  const style = document.createElement("style");
  style.textContent = '[data-herdr-fold="closed"]{max-height:3.2em;overflow:hidden;opacity:.6;cursor:zoom-in}';
  document.head.append(style);
}

function setNote(text) {
  state.note = text;
  render();
}

function render() {
  hud?.setBridge(`${t("bridgeLine", scope() ?? t("bridgeNoConversation"))}${state.note ? ` · ${state.note}` : ""}`);
}
