// The tabs whose content script is connected, one registry per kind of port: ChatGPT's content
// script (port "page") and the bridge's raw channel on z.ai and DeepSeek (port "bridge-page").
// Each tab: what it shows, whether its conversation is confirmed at rest, and sending a message
// into it with an answer saying whether the send was confirmed. `TabGroup` lets the continuity
// pump look across both registries (a z.ai or DeepSeek conversation is woken like ChatGPT's).

import { pageScope } from "../lib/scope.js";
import { mark } from "../lib/trace.js";

export const SEND_TIMEOUT_MS = 30_000;

export class Tabs {
  constructor({ onPage, onIdle, onMessage, log = console }) {
    this.byId = new Map();
    this.onPage = onPage;
    this.onIdle = onIdle;
    this.onMessage = onMessage;
    this.log = log;
    this.nextSend = 1;
    this.lastActive = null;
  }

  attach(port) {
    const tabId = port.sender?.tab?.id;
    if (tabId === undefined) {
      port.disconnect();
      return;
    }
    const tab = { tabId, port, page: null, url: null, idle: false, sends: new Map(), rootScope: null };
    this.byId.set(tabId, tab);
    port.onMessage.addListener((message) => this.received(tab, message));
    port.onDisconnect.addListener(() => {
      if (this.byId.get(tabId) === tab) {
        this.byId.delete(tabId);
      }
      for (const { resolve } of tab.sends.values()) {
        resolve({ ok: false, reason: "tab_closed" });
      }
    });
  }

  received(tab, message) {
    switch (message?.type) {
      case "page": {
        const previous = tab.page;
        tab.url = message.url;
        tab.page = pageScope(message.url, `tab-${tab.tabId}`);
        tab.idle = Boolean(message.idle);
        this.lastActive = tab.tabId;
        if (tab.page?.kind === "root") {
          tab.rootScope = tab.page.scope;
        }
        this.onPage(tab, previous);
        return;
      }
      case "composer": {
        const wasIdle = tab.idle;
        tab.idle = Boolean(message.idle);
        if (message.focused) {
          this.lastActive = tab.tabId;
        }
        if (tab.idle && !wasIdle) {
          this.onIdle(tab);
        }
        return;
      }
      case "sent": {
        const waiting = tab.sends.get(message.id);
        if (waiting) {
          tab.sends.delete(message.id);
          clearTimeout(waiting.timer);
          waiting.resolve({ ok: Boolean(message.ok), reason: message.reason ?? null });
        }
        return;
      }
      default:
        this.onMessage(tab, message);
    }
  }

  /** A tab showing conversation `convKey`, the most recently active first; null if none. */
  forConv(convKey) {
    const tabs = [...this.byId.values()].filter((tab) => tab.page && tab.page.convKey === convKey);
    tabs.sort((a, b) => (b.tabId === this.lastActive) - (a.tabId === this.lastActive));
    return tabs[0] ?? null;
  }

  /** The tab to show in the side panel: `preferred` when it is a connected ChatGPT tab, else the last active one. */
  current(preferred) {
    return this.byId.get(preferred) ?? this.byId.get(this.lastActive) ?? null;
  }

  all() {
    return [...this.byId.values()];
  }

  /**
   * Type `text` into the tab's composer and send it. Resolves `{ok: true}` once the page shows
   * the sent user turn, `{ok: false, reason}` otherwise: "busy" (nothing was typed) or
   * "unconfirmed" (typed or clicked, but the turn never showed up).
   */
  send(tab, text) {
    const id = `m${this.nextSend++}`;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        tab.sends.delete(id);
        resolve({ ok: false, reason: "unconfirmed" });
      }, SEND_TIMEOUT_MS);
      tab.sends.set(id, { resolve, timer });
      tab.idle = false;
      try {
        mark(`herdr:send:${tab.tabId}`, { id }); // benchmarks/wake_bench.py: the send leaving the worker
        tab.port.postMessage({ type: "send", id, text });
      } catch (error) {
        clearTimeout(timer);
        tab.sends.delete(id);
        this.log.warn("herdr-mcp: the tab went away before the send", error.message);
        resolve({ ok: false, reason: "tab_closed" });
      }
    });
  }

  post(tab, message) {
    try {
      tab.port.postMessage(message);
    } catch {
      // the tab is going away; its disconnect cleans up
    }
  }
}

/** Several registries seen as one by the continuity pump: lookups across all, sends through the tab's own port. */
export class TabGroup {
  constructor(registries) {
    this.registries = registries;
  }

  forConv(convKey) {
    for (const registry of this.registries) {
      const tab = registry.forConv(convKey);
      if (tab) {
        return tab;
      }
    }
    return null;
  }

  all() {
    return this.registries.flatMap((registry) => registry.all());
  }

  send(tab, text) {
    return this.registryOf(tab).send(tab, text);
  }

  post(tab, message) {
    this.registryOf(tab).post(tab, message);
  }

  registryOf(tab) {
    return this.registries.find((registry) => registry.byId.get(tab.tabId) === tab) ?? this.registries[0];
  }
}
