// The service worker (an ES module): wires the native port, the push follower, bindings, the
// tabs' content scripts, the side panel and the 429 observer together. Listeners are registered
// at the top level so a restarted worker gets its events.

import { QueueError, addEntry } from "../lib/queue.js";
import { isScope } from "../lib/scope.js";
import { Bindings } from "./bindings.js";
import { Bridge } from "./bridge.js";
import { Continuity } from "./continuity.js";
import { Handoff } from "./handoff.js";
import { Rollover } from "./rollover.js";
import { ControlCenter } from "./control.js";
import { Journal } from "./journal.js";
import { NativeClient } from "./native-port.js";
import { PushFollower } from "./push-follower.js";
import { tabReload } from "./page-health.js";
import { RateLimit } from "./ratelimit.js";
import * as keys from "../lib/storage-keys.js";
import * as store from "./store.js";
import { TabGroup, Tabs } from "./tabs.js";
import { cutCodePoints } from "../lib/text.js";
import { t } from "../lib/i18n.js";

const native = new NativeClient();
const bindings = new Bindings(native);
const bridge = new Bridge(native);
const journal = new Journal(native, bindings);
const rateLimit = new RateLimit({ onChange: () => continuity.broadcast() });
const pageEvents = {
  onPage: (tab, previous) => pageChanged(tab, previous),
  onIdle: (tab) => continuity.pump(tab.page?.convKey),
  onMessage: (tab, message) => pageMessage(tab, message),
};
// ChatGPT's pages (port "page"), and z.ai's and DeepSeek's through the bridge content script's
// raw channel (port "bridge-page", never the JSON bridge's "bridge"). Two registries because the
// handoff opens and drives a page of a given site (handoff.tabsOf); the rest treats them alike:
// a bound conversation on any of the three sites gets the queue, wakes, progress and Auto.
const tabs = new Tabs(pageEvents);
const bridgeTabs = new Tabs(pageEvents);
const continuity = new Continuity({ native, bindings, tabs: new TabGroup([tabs, bridgeTabs]), rateLimit });
const handoff = new Handoff({ native, bindings, tabs, bridgeTabs, continuity });
continuity.holds = (convKey) => handoff.holds(convKey);
continuity.primer = async () => (await bridge.received({ type: "prompt" })).text;
const rollover = new Rollover({ bindings, handoff, continuity });
continuity.handoffView = (scope) => {
  const shown = handoff.view(scope);
  const pressure = rollover.view(scope);
  return shown || pressure ? { ...shown, pressure } : null;
};
const control = new ControlCenter(native);
const follower = new PushFollower(
  native,
  (type, data) => {
    const handled = continuity.handle(type, data);
    setTimeout(() => control.onEvent(type, data), 0); // open panels re-read after the wake's own work
    return handled;
  },
  {
    onHello: (hello, lastSeq) => {
      handoff.retryCutovers(); // loads the transfers once, and goes on with a failed cutover
      return continuity.hello(hello, lastSeq);
    },
  },
);

rateLimit.observe();
native.onConnection((up) => {
  if (up) {
    follower.reconnected();
  }
  continuity.broadcast();
});

chrome.runtime.onConnect.addListener((port) => {
  if (port.name === "page") {
    tabs.attach(port);
  } else if (port.name === "bridge" && /^https:\/\/chat\.(z\.ai|deepseek\.com)\//.test(port.sender?.url ?? "")) {
    bridge.attach(port);
  } else if (port.name === "bridge-page" && /^https:\/\/chat\.(z\.ai|deepseek\.com)\//.test(port.sender?.url ?? "")) {
    bridgeTabs.attach(port);
  }
});

chrome.runtime.onMessage.addListener((message, sender, reply) => {
  // Only the extension's own pages (the side panel, also when opened as a tab) ask here; content
  // scripts talk over their "page" port.
  if (sender.id !== chrome.runtime.id || !sender.url?.startsWith(chrome.runtime.getURL(""))) {
    return false;
  }
  panelMessage(message).then(reply, (error) => reply({ error: { code: error.code ?? "failed", message: error.message } }));
  return true;
});

chrome.storage.onChanged.addListener((changes, area) => {
  if (area === "local" && changes[keys.OPTIONS]) {
    continuity.setOptions(changes[keys.OPTIONS].newValue);
  }
});

chrome.alarms.onAlarm.addListener((alarm) => {
  if (alarm.name === "herdr-mcp-keepalive") {
    native.connect();
    continuity.pumpAll();
  }
});
chrome.alarms.create("herdr-mcp-keepalive", { periodInMinutes: 1 });

chrome.runtime.onInstalled.addListener(() => {
  chrome.sidePanel?.setPanelBehavior?.({ openPanelOnActionClick: true }).catch(() => {});
});

/** The connector name ChatGPT shows on the Herdr tool cards (options `connectorName`). */
const DEFAULT_CONNECTOR = "Herdr";

/**
 * Seed 000: a ChatGPT page accepts this connector's tool confirmation cards by itself; it is told
 * the connector's name and the live catalog's tool names (tools/list through the native host).
 */
async function sendCardPolicy(tab) {
  if (tab.page?.site !== "chatgpt" && !tab.url?.startsWith("https://chatgpt.com/")) {
    return;
  }
  try {
    const [tools, options] = await Promise.all([bridge.listTools(), store.get(keys.OPTIONS, {})]);
    const connector = typeof options.connectorName === "string" && options.connectorName.trim() ? options.connectorName.trim() : DEFAULT_CONNECTOR;
    tabs.post(tab, { type: "cards.policy", connector, tools: tools.map((tool) => tool.name).filter((name) => typeof name === "string") });
  } catch (error) {
    console.warn("herdr-mcp: the tool catalog for the confirmation cards failed", error.message);
  }
}

/** The notifications shown (the last 20), for the end-to-end tests: `globalThis.herdrNotified`. */
const notified = [];
globalThis.herdrNotified = notified;

// A plain 16x16 square (the extension ships no icon files; chrome.notifications needs one).
const NOTIFICATION_ICON =
  "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAABAAAAAQCAIAAACQkWg2AAAAFklEQVR42mNQSFhAEmIY1TCqYfhqAACc2CAQXBvANQAAAABJRU5ErkJggg==";

/** A confirmation card the page left alone: a browser notification, once per card. */
function cardWaiting(tab, message) {
  notified.push({ tabId: tab.tabId, reason: message.reason, at: Date.now() });
  notified.splice(0, Math.max(0, notified.length - 20));
  chrome.notifications?.create(`herdr-card-${tab.tabId}-${Date.now()}`, {
    type: "basic",
    iconUrl: NOTIFICATION_ICON,
    title: t("notifyCardTitle"),
    message: cutCodePoints(t("notifyCardMessage", message.reason), 300),
    priority: 1,
  });
}

async function pageChanged(tab, previous) {
  const page = tab.page;
  sendCardPolicy(tab);
  try {
    if (tab.rootScope && page && page.kind !== "root") {
      const rootScope = tab.rootScope;
      tab.rootScope = null;
      const moved = await bindings.migrateRoot(rootScope, page);
      if (moved) {
        continuity.note(page.scope, t("notePendingBindingMoved"));
      }
    }
    const binding = page ? bindings.get(page.scope) : null;
    if (binding && page.kind === "project" && page.convKey && !binding.active_conv_key) {
      await bindings.set(page.scope, binding.workspace_id, { label: binding.label, active_conv_key: page.convKey });
    }
  } catch (error) {
    console.warn("herdr-mcp: following the page failed", error.message);
  }
  continuity.broadcast();
  if (page?.convKey && page.convKey !== previous?.convKey) {
    continuity.pump(page.convKey);
    handoff.pageSeen(tab);
  }
}

async function pageMessage(tab, message) {
  const page = tab.page;
  try {
    switch (message.type) {
      case "queue.add": {
        if (!page?.convKey) {
          throw new QueueError("queue_no_conversation", "Queue needs a conversation page.");
        }
        await store.update(keys.queue(page.convKey), [], (queue) => addEntry(queue, message.text, Date.now()));
        continuity.tabs.post(tab, { type: "queued", ok: true });
        continuity.pump(page.convKey);
        break;
      }
      case "queue.clear":
        if (page?.convKey) {
          await store.remove(keys.queue(page.convKey));
        }
        break;
      case "auto.set":
        if (page && isScope(page.scope)) {
          await store.set(keys.auto(page.scope), Boolean(message.on));
          continuity.note(page.scope, message.on ? t("noteAutoOn") : t("noteAutoOff"));
          if (message.on) {
            continuity.pumpScope(page.scope);
          }
        }
        break;
      case "continue":
        if (page?.convKey) {
          await continuity.pump(page.convKey, { manual: true });
        }
        break;
      case "check": // the HUD's Check Herdr (continuity.js)
        if (page?.convKey) {
          await continuity.check(page.convKey);
        }
        break;
      case "handoff.start":
        await handoff.begin(tab);
        break;
      case "handoff.resume":
        if (page) {
          await handoff.resume(page.scope);
        }
        break;
      // Page health is ChatGPT's (content/page-health.js); a bridge page never asks for it.
      case "health.tabReload":
        if (page?.site === "chatgpt") {
          await tabReload(tab, message, (target, reply) => continuity.tabs.post(target, reply));
        }
        break;
      case "health.rollover":
        if (page?.site === "chatgpt") {
          await rollover.recommended(tab, message);
        }
        break;
      case "card":
        if (message.state === "waiting") {
          cardWaiting(tab, message);
        }
        continuity.note(page?.scope, message.state === "accepted" ? t("noteCardAccepted", message.tool) : t("noteCardWaiting"));
        break;
      case "handoff.seeded":
      case "handoff.probed":
        handoff.reply(message);
        break;
      case "turns":
        if (page?.convKey) {
          await followActiveConversation(page, message.turns);
          await journal.report(page, message.turns, message.title);
          if (page.site === "chatgpt") {
            // Seed 002: Auto on z.ai or DeepSeek does not turn on ChatGPT's auto rollover.
            await rollover.consider(tab, message);
          }
        }
        break;
      default:
        break;
    }
  } catch (error) {
    continuity.tabs.post(tab, { type: "error", code: error.code ?? "failed", message: error.message });
  }
  continuity.broadcast();
}

/** In a bound Project, the conversation where the person just sent a message becomes the active one. */
async function followActiveConversation(page, turns) {
  const binding = bindings.get(page.scope);
  if (!binding || page.kind !== "project" || binding.active_conv_key === page.convKey) {
    return;
  }
  if (handoff.busy(page.scope)) {
    return; // a handoff's target becomes active only by its confirmed cutover
  }
  if (turns.some((turn) => turn.fresh && turn.role === "user")) {
    await bindings.set(page.scope, binding.workspace_id, { label: binding.label, active_conv_key: page.convKey });
  }
}

async function panelMessage(message) {
  // The panel's tab when it is a connected ChatGPT, z.ai or DeepSeek page, else the last active one.
  const tab =
    tabs.byId.get(message.tabId) ?? bridgeTabs.byId.get(message.tabId) ?? tabs.current(message.tabId) ?? bridgeTabs.current(message.tabId);
  switch (message.type) {
    case "panel.state": {
      const workspaces = native.connected ? (await bindings.refreshState()).workspaces : [];
      return { connected: native.connected, tab: tab ? await continuity.hudState(tab) : null, workspaces };
    }
    case "panel.bind": {
      if (!tab?.page) {
        throw new Error("Open a ChatGPT conversation, Project or home page, or a z.ai or DeepSeek conversation, first.");
      }
      const page = tab.page;
      const binding = await bindings.set(page.scope, message.workspaceId, {
        active_conv_key: page.kind === "project" ? page.convKey : null,
      });
      continuity.note(page.scope, message.workspaceId ? t("noteBound", binding?.label ?? message.workspaceId) : t("noteUnbound"));
      continuity.broadcast();
      return { binding };
    }
    case "control.request":
      return control.request(message.method, message.body);
    default:
      throw new Error(`unknown request ${message.type}`);
  }
}

store.get(keys.OPTIONS, {}).then((options) => continuity.setOptions(options));
native.connect();
follower.start();
