// The content script: reports the page (URL, composer idle or not, finalized turns) to the
// worker, sends what the worker asks it to, and runs the HUD. All DOM knowledge is in
// chatgpt-dom.js.

import * as dom from "./chatgpt-dom.js";
import { showRest } from "./site-dom.js";
import { Hud } from "./hud.js";
import { PageHealth } from "./page-health.js";
import { classifyCard } from "../lib/tool-card.js";
import { cutCodePoints } from "../lib/text.js";
import { t } from "../lib/i18n.js";
import { mark } from "../lib/trace.js";

const URL_POLL_MS = 300;
/** Cards and the journal's turns are checked at most this often while the page changes. */
const CHECK_DELAY_MS = 100;
const RECONNECT_MS = 1_000;

let port = null;
let hud = null;
let lastIdle = null;
let lastUrl = null;
let sending = false;
let seenAtLoad = null;
let reportedTurns = "";
let health = null;
// Tool confirmation cards (seed 000): the worker's policy `{connector, tools}`, each card's
// outcome ("accepted" or "waiting"), and why the newest waiting card was left alone.
let cardPolicy = null;
const cardSeen = new WeakMap();
let cardWaiting = null;

export function start() {
  if (document.querySelector("herdr-mcp-hud")) {
    return; // already running in this document
  }
  hud = new Hud({
    onContinue: () => post({ type: "continue" }),
    onCheck: () => post({ type: "check" }),
    onAuto: (on) => post({ type: "auto.set", on }),
    onQueue: () => queueComposer(),
    onClearQueue: () => post({ type: "queue.clear" }),
    onHandoff: (action) => post({ type: action === "resume" ? "handoff.resume" : "handoff.start" }),
  });
  seenAtLoad = new Set(dom.turns().map((turn) => turn.key));
  health = new PageHealth({ hud, post, busy: () => sending });
  health.start();
  connect();
  // The rest report follows the page as it changes (a reply ending, a draft cleared); the rest of
  // the check (cards, the journal's turns) runs at most every CHECK_DELAY_MS.
  new MutationObserver(() => {
    reportRest();
    scheduleCheck();
  }).observe(document.documentElement, {
    childList: true,
    subtree: true,
    characterData: true,
    attributes: true,
    attributeFilter: ["data-testid", "disabled", "data-message-id", "data-message-streaming"],
  });
  setInterval(() => {
    if (location.href !== lastUrl) {
      announce();
    }
  }, URL_POLL_MS);
}

function connect() {
  port = chrome.runtime.connect({ name: "page" });
  port.onMessage.addListener(received);
  port.onDisconnect.addListener(() => {
    // The worker stopped (or the extension reloaded); a new port starts it again.
    port = null;
    setTimeout(connect, RECONNECT_MS);
  });
  announce();
}

function post(message) {
  try {
    port?.postMessage(message);
  } catch {
    // disconnected; the reconnect announces the page again
  }
}

function announce() {
  lastUrl = location.href;
  lastIdle = dom.isIdle();
  reportedTurns = "";
  post({ type: "page", url: location.href, idle: lastIdle });
  showRest(lastIdle);
  reportTurns();
}

let checkPending = false;
function scheduleCheck() {
  if (checkPending) {
    return;
  }
  checkPending = true;
  setTimeout(() => {
    checkPending = false;
    check();
  }, CHECK_DELAY_MS);
}

function check() {
  checkCards();
  if (sending) {
    return;
  }
  reportRest();
  reportTurns();
}

/** Tell the worker when the page's rest (chatgpt-dom.js isIdle) changed; nothing while we type. */
function reportRest() {
  if (sending) {
    return;
  }
  const idle = dom.isIdle();
  if (idle !== lastIdle) {
    lastIdle = idle;
    post({ type: "composer", idle, focused: document.hasFocus() });
    showRest(idle);
  }
}

/**
 * Seed 000: this connector's tool confirmation card is accepted (Allow, once) whether Auto is on
 * or off; any other card is left alone and the worker told, which shows a notification; the HUD
 * says a confirmation is waiting while one is. lib/tool-card.js decides which card is ours.
 */
function checkCards() {
  let waiting = null;
  let accepted = null;
  for (const card of dom.toolCards()) {
    if (cardSeen.get(card.element) === "accepted") {
      continue;
    }
    const verdict = cardPolicy ? classifyCard(card, cardPolicy) : { ours: false, reason: "the tool catalog is not known yet" };
    if (verdict.ours) {
      cardSeen.set(card.element, "accepted");
      card.buttonElements[verdict.allow].click();
      accepted = verdict.tool;
      post({ type: "card", state: "accepted", tool: verdict.tool });
      continue;
    }
    waiting = verdict.reason;
    if (!cardSeen.has(card.element) && cardPolicy) {
      cardSeen.set(card.element, "waiting");
      post({ type: "card", state: "waiting", reason: verdict.reason, summary: cutCodePoints(card.labels.slice(0, 4).join(" · "), 200) });
    }
  }
  if (accepted) {
    document.documentElement.dataset.herdrCard = `accepted ${accepted}`;
  }
  if (waiting !== cardWaiting) {
    cardWaiting = waiting;
    if (waiting) {
      document.documentElement.dataset.herdrCard = `waiting: ${waiting}`;
      hud.flash(t("hudCardWaiting"));
    } else {
      hud.render(hud.state); // the state line again, without the waiting note
      if (!accepted) {
        delete document.documentElement.dataset.herdrCard;
      }
    }
  }
}

/** Finalized turns: all of them once no reply is generating. */
function reportTurns() {
  if (dom.isGenerating()) {
    return;
  }
  const turns = dom.turns().filter((turn) => turn.key && turn.text);
  const signature = turns.map((turn) => `${turn.key}:${turn.text.length}`).join("|");
  if (signature === reportedTurns || turns.length === 0) {
    return;
  }
  reportedTurns = signature;
  post({
    type: "turns",
    title: dom.title(),
    turns: turns.map((turn) => ({ ...turn, fresh: !seenAtLoad.has(turn.key) })),
    metrics: dom.pressureSignals(),
  });
}

async function received(message) {
  if (message.type === "hud") {
    hud.render(message.state);
    health.update(message.state);
    if (cardWaiting) {
      hud.flash(t("hudCardWaiting")); // why it was left alone: the notification and data-herdr-card
    }
  } else if (message.type === "cards.policy") {
    cardPolicy = { connector: message.connector, tools: message.tools };
    check();
  } else if (message.type === "send") {
    mark("herdr:send-received", { id: message.id }); // benchmarks/wake_bench.py
    sending = true;
    let result;
    try {
      result = await dom.send(message.text);
    } catch (error) {
      result = { ok: false, reason: "unconfirmed", detail: String(error) };
    } finally {
      sending = false;
    }
    post({ type: "sent", id: message.id, ...result });
    lastIdle = null;
    check();
  } else if (message.type === "handoff.seed" || message.type === "handoff.probe") {
    await handoffRequest(message);
  } else if (message.type === "health.refused") {
    await health.tabReloadRefused(message.reason);
  } else if (message.type === "error") {
    hud.flash(message.message);
  } else if (message.type === "queued") {
    dom.clearComposer();
  }
}

function queueComposer() {
  const text = dom.composerText();
  if (!text) {
    hud.flash(t("hudQueueEmpty"));
    return;
  }
  post({ type: "queue.add", text });
}

/** The worker's handoff requests: type the seed here, or look for its marker (chatgpt-dom.js). */
async function handoffRequest(message) {
  let result;
  if (message.type === "handoff.seed") {
    sending = true;
    try {
      result = await dom.submitSeed(message.text, message.marker, { idleMs: message.idleMs, deadlineMs: message.deadlineMs });
    } catch (error) {
      // Something went wrong after typing may have begun: say so (the worker treats it as uncertain).
      result = { typed: true, markerSeen: false, detail: String(error) };
    } finally {
      sending = false;
    }
  } else {
    result = await dom.probeMarker(message.marker, message.deadlineMs);
  }
  post({ type: message.type === "handoff.seed" ? "handoff.seeded" : "handoff.probed", id: message.id, url: location.href, ...result });
  if (location.href !== lastUrl) {
    announce();
  }
  lastIdle = null;
  check();
}
