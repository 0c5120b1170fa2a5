// The continuity state machine of the worker: push events -> turns of workspaces -> one pending
// wake per scope and turn; progress ticks; and the pump that sends into a conversation's tab,
// in this order: the person's queue first, then (Auto on, or a manual continue) the wake, then
// progress; before all of these, a handoff's new z.ai or DeepSeek conversation gets the bridge's
// protocol prompt (`primer`). One message per confirmed-idle composer; nothing while a send is
// unconfirmed or ChatGPT answered 429. `tabs` spans ChatGPT's pages and the bridge's z.ai and
// DeepSeek pages (a TabGroup): a conversation bound on any of the three sites is woken alike.

import { t } from "../lib/i18n.js";
import { checkText, continueText, fallbackText, progressText, wakeText } from "../lib/messages.js";
import { addOutput, initialProgress, normalizeOptions, startTurn, tick } from "../lib/progress.js";
import { nextBatch, removeSent } from "../lib/queue.js";
import { wakeTarget } from "../lib/scope.js";
import { initialWake, initialWorkspace, onSettled, onWorking, reconcile, wakeFor, woke } from "../lib/settle.js";
import * as keys from "../lib/storage-keys.js";
import * as store from "./store.js";

/**
 * A scope's inbox read when the settle that ends a turn arrived is what its wake lists for at most
 * this long; a wake sent later (Auto off, then Continue; a busy page) reads it again.
 */
export const WAKE_INBOX_FRESH_MS = 2_000;

/** Why Check Herdr sent nothing, as the HUD flashes it (catalog names). */
const CHECK_REFUSED = {
  auto: "hudCheckRefusedAuto",
  unbound: "hudCheckRefusedUnbound",
  busy: "hudCheckRefusedBusy",
  paused: "hudCheckRefusedBusy",
  handoff: "hudCheckRefusedBusy",
};

export class Continuity {
  constructor({ native, bindings, tabs, rateLimit, now = () => Date.now(), log = console }) {
    this.native = native;
    this.bindings = bindings;
    this.tabs = tabs;
    this.rateLimit = rateLimit;
    this.now = now;
    this.log = log;
    this.pumping = new Map();
    this.ticker = null;
    this.pauseTimer = null;
    this.options = normalizeOptions({});
    this.notes = new Map();
    this.prefetched = new Map(); // scope -> {at, inbox}: the inbox read as the turn's settle arrived
    this.broadcastTimer = null;
  }

  // ---- push events

  async handle(type, data) {
    const workspaceId = data.workspace_id;
    if (type === "agent_working" || type === "agent_settled" || type === "agent_gone") {
      this.bindings.follow(type, data); // the agents a wake names, as of this event
    }
    if (type === "agent_working") {
      const before = await store.get(keys.workspace(workspaceId), initialWorkspace());
      const after = onWorking(before, data.seq);
      await store.set(keys.workspace(workspaceId), after);
      if (after !== before) {
        for (const binding of this.bindings.scopesOf(workspaceId)) {
          await store.update(keys.progress(binding.scope), initialProgress(), (value) => startTurn(value, this.now()));
          this.note(binding.scope, t("noteWorking"));
        }
      }
    } else if (type === "agent_output") {
      for (const binding of this.bindings.scopesOf(workspaceId)) {
        await store.update(keys.progress(binding.scope), initialProgress(), (value) => addOutput(value, data.text));
      }
    } else if (type === "agent_settled") {
      const before = await store.get(keys.workspace(workspaceId), initialWorkspace());
      const { workspace, settledTurn } = onSettled(before, data);
      if (settledTurn !== null) {
        this.readInboxes(workspaceId, data.inbox); // side by side with recording the turn and its wake
      }
      // The turn's end and its wakes are written side by side (two writes in flight, not one after
      // the other); a wake is sent only once its own record is written (turnEnded).
      await Promise.all([store.set(keys.workspace(workspaceId), workspace), this.turnEnded(workspaceId, settledTurn, data.seq)]);
    } else if (type === "agent_gone") {
      await this.bindings.refreshState().catch(() => {});
    }
    this.broadcast();
  }

  async turnEnded(workspaceId, turn, seq) {
    if (turn === null) {
      return;
    }
    // Each bound scope's wake is recorded on its own (side by side), then pumped.
    const scopes = this.bindings.scopesOf(workspaceId).map(async (binding) => {
      const { created } = await this.addWake(binding.scope, turn, seq);
      if (created) {
        // Progress of the ended turn is stale: gone from the store's copy at once (the pump reads
        // none), from storage by the time this returns.
        const removed = store.remove(keys.outbox(binding.scope));
        this.note(binding.scope, t("noteWakePending"));
        this.pumpScope(binding.scope);
        await removed;
      }
    });
    await Promise.all(scopes);
  }

  async addWake(scope, turn, seq) {
    let created = false;
    await store.update(keys.wake(scope), initialWake(), (value) => {
      const result = wakeFor(value, turn, this.now(), seq ?? null);
      created = result.created;
      return result.wake;
    });
    return { created };
  }

  /** After (re)connecting: bindings and live state, reconciled when the log had a gap or we start fresh. */
  async hello(hello, lastSeq) {
    await this.bindings.refresh();
    const state = await this.bindings.refreshState();
    const gap = lastSeq === null || Boolean(hello.replay?.gap);
    for (const workspace of state.workspaces) {
      const known = await store.get(keys.workspace(workspace.workspace_id), null);
      if (known === null || gap) {
        const { workspace: after, settledTurn } = reconcile(known ?? initialWorkspace(), workspace.working, state.seq);
        await store.set(keys.workspace(workspace.workspace_id), after);
        if (known !== null) {
          await this.turnEnded(workspace.workspace_id, settledTurn, state.seq);
        }
      }
    }
    await this.checkInboxes(hello.seq);
    await this.dropStaleRootBindings();
    this.broadcast();
    this.pumpAll();
  }

  /**
   * Unacknowledged task outcomes of a scope wake it too (once per newest entry), as of log
   * position `seq`: a settle replayed after this, older than `seq`, is covered by that wake.
   */
  async checkInboxes(seq) {
    for (const binding of [...this.bindings.byScope.values()]) {
      if (binding.scope.includes(":root:")) {
        continue;
      }
      try {
        const { items } = await this.native.call("/browser/inbox.read", { scope: binding.scope });
        if (items.length > 0) {
          const { created } = await this.addWake(binding.scope, `inbox${items[items.length - 1].inbox_id}`, seq);
          if (created) {
            this.note(binding.scope, t("noteTaskFinished"));
          }
        }
      } catch (error) {
        this.log.warn("herdr-mcp: inbox.read failed", binding.scope, error.message);
      }
    }
  }

  /** A root page's pending binding (`<site>:root:tab-<id>`) whose tab is gone is dropped. */
  async dropStaleRootBindings() {
    const open = new Set(this.tabs.all().map((tab) => tab.tabId));
    for (const scope of [...this.bindings.byScope.keys()]) {
      const match = /^[a-z]+:root:tab-(\d+)$/.exec(scope);
      const tabId = match ? Number(match[1]) : null;
      if (match && !open.has(tabId)) {
        const alive = await chrome.tabs.get(tabId).then(() => true, () => false);
        if (!alive) {
          await this.bindings.set(scope, null).catch(() => {});
        }
      }
    }
  }

  // ---- a wake's inbox

  /**
   * The task inbox of each scope bound to `workspaceId`, as the settle that ends its turn arrives:
   * the one the settle carries (`inbox`, a runtime since issue 24 sends each bound scope's
   * inbox.read answer with it), else read now, while the turn and its wake are recorded. The pump
   * takes it (`wakeInbox`).
   */
  readInboxes(workspaceId, carried) {
    const at = this.now();
    for (const binding of this.bindings.scopesOf(workspaceId)) {
      const given = carried?.[binding.scope];
      const inbox = Array.isArray(given?.items) ? Promise.resolve(given.items) : this.readInbox(binding.scope);
      this.prefetched.set(binding.scope, { at, inbox });
    }
  }

  /**
   * The unacknowledged task outcomes the wake being sent to `scope` lists (a promise that never
   * rejects): the read started when the settle arrived if at most WAKE_INBOX_FRESH_MS old, else
   * one made now.
   */
  wakeInbox(scope) {
    const kept = this.prefetched.get(scope);
    this.prefetched.delete(scope);
    if (kept && this.now() - kept.at <= WAKE_INBOX_FRESH_MS) {
      return kept.inbox;
    }
    return this.readInbox(scope);
  }

  readInbox(scope) {
    return this.native.call("/browser/inbox.read", { scope }).then(
      ({ items }) => items,
      (error) => {
        this.log.warn("herdr-mcp: inbox.read failed", error.message);
        return [];
      },
    );
  }

  // ---- progress

  setOptions(raw) {
    this.options = normalizeOptions(raw);
    clearInterval(this.ticker);
    this.ticker = setInterval(() => this.tick().catch((error) => this.log.warn("herdr-mcp: tick", error)), this.options.progressTickSec * 1000);
  }

  async tick() {
    for (const binding of [...this.bindings.byScope.values()]) {
      const workspace = await store.get(keys.workspace(binding.workspace_id), initialWorkspace());
      if (!workspace.working) {
        continue;
      }
      let send = null;
      await store.update(keys.progress(binding.scope), initialProgress(), (value) => {
        const result = tick(value, this.now(), this.options);
        send = result.send;
        return result.state;
      });
      if (!send) {
        continue;
      }
      const names = { label: binding.label, workspaceId: binding.workspace_id };
      const text = send.kind === "progress" ? progressText({ ...names, summary: send.summary }) : fallbackText({ ...names, quietSec: send.quietSec });
      await store.set(keys.outbox(binding.scope), { text, at: this.now() });
      this.note(binding.scope, send.kind === "progress" ? t("noteProgress", send.summary.split("\n").pop()) : t("noteQuiet"));
      this.pumpScope(binding.scope);
    }
    this.broadcast();
  }

  // ---- sending

  pumpAll() {
    for (const tab of this.tabs.all()) {
      if (tab.page?.convKey) {
        this.pump(tab.page.convKey);
      }
    }
  }

  pumpScope(scope) {
    const target = wakeTarget(scope, this.bindings.get(scope));
    if (target) {
      this.pump(target);
    }
  }

  /** Send the next due message into conversation `convKey`'s tab; serialised per conversation. */
  pump(convKey, { manual = false } = {}) {
    const previous = this.pumping.get(convKey) ?? Promise.resolve();
    const next = previous
      .then(() => this.pumpOnce(convKey, manual))
      .catch((error) => this.log.warn("herdr-mcp: sending failed", convKey, error.message));
    this.pumping.set(convKey, next);
    return next;
  }

  async pumpOnce(convKey, manual) {
    const tab = this.tabs.forConv(convKey);
    if (!tab) {
      return "no_tab";
    }
    if (this.holds?.(convKey)) {
      return "handoff"; // the source of a handoff in flight waits (background/handoff.js)
    }
    const scope = tab.page.scope;
    // Everything the pump may need, read at once (one round trip each, side by side, instead of
    // one after the other): nothing below awaits anything else before it has decided.
    const [paused, stored] = await Promise.all([
      this.rateLimit.remaining(tab.page.site),
      store.getMany({
        [keys.uncertain(convKey)]: false,
        [keys.prime(convKey)]: false,
        [keys.queue(convKey)]: [],
        [keys.auto(scope)]: false,
        [keys.wake(scope)]: initialWake(),
        [keys.outbox(scope)]: null,
      }),
    ]);
    if (paused > 0) {
      clearTimeout(this.pauseTimer);
      this.pauseTimer = setTimeout(() => this.pumpAll(), paused + 50);
      this.broadcast();
      return "paused";
    }
    if (!tab.idle) {
      return "busy";
    }
    if (!manual && stored[keys.uncertain(convKey)]) {
      return "uncertain";
    }
    if (tab.page.site !== "chatgpt" && stored[keys.prime(convKey)] && this.primer) {
      // A handoff's new z.ai or DeepSeek conversation: the bridge's protocol prompt first.
      const sent = await this.send(tab, convKey, await this.primer());
      if (sent) {
        await store.remove(keys.prime(convKey));
        this.note(tab.page.scope, t("notePrimed"));
      }
      this.broadcast();
      return sent ? "prime" : "failed";
    }
    const batch = nextBatch(stored[keys.queue(convKey)]);
    if (batch) {
      const sent = await this.send(tab, convKey, batch.text);
      if (sent) {
        await store.update(keys.queue(convKey), [], (value) => removeSent(value, batch.ids));
        this.note(tab.page.scope, t("noteQueueSent"));
      }
      this.broadcast();
      return sent ? "queue" : "failed";
    }
    const bridged = tab.page.site !== "chatgpt";
    const binding = this.bindings.get(scope);
    if (!binding || wakeTarget(scope, binding) !== convKey) {
      if (manual) {
        // No workspace to name: Continue only asks the conversation to go on.
        return this.sendContinue(tab, convKey, continueText({ bridged }));
      }
      return "unbound";
    }
    const auto = stored[keys.auto(scope)] === true;
    const names = { label: binding.label, workspaceId: binding.workspace_id };
    const wake = stored[keys.wake(scope)];
    if (wake.pending && (auto || manual)) {
      // The scope's task inbox, read when the settle arrived (while the wake was being recorded)
      // or now; the agents as the push events left them (bindings.follow).
      const inbox = await this.wakeInbox(scope);
      const agents = this.bindings.workspaces.get(binding.workspace_id)?.agents ?? [];
      const sent = await this.send(tab, convKey, wakeText({ ...names, agents, inbox, bridged }));
      if (!sent) {
        return "failed";
      }
      await store.update(keys.wake(scope), initialWake(), (value) => woke(value, wake.pending));
      await store.remove(keys.outbox(scope));
      if (inbox.length > 0) {
        // Acknowledged only now that the wake is confirmed sent.
        await this.native.call("/browser/inbox.ack", { scope, inbox_ids: inbox.map((item) => item.inbox_id) });
      }
      this.note(scope, t("noteWoke"));
      this.broadcast();
      return "wake";
    }
    const outbox = stored[keys.outbox(scope)];
    if (outbox && auto) {
      const sent = await this.send(tab, convKey, outbox.text);
      if (sent) {
        await store.remove(keys.outbox(scope));
        this.note(scope, t("noteProgressSent"));
      }
      this.broadcast();
      return sent ? "progress" : "failed";
    }
    if (manual) {
      return this.sendContinue(tab, convKey, continueText({ ...names, bridged }));
    }
    return "nothing";
  }

  async sendContinue(tab, convKey, text) {
    const sent = await this.send(tab, convKey, text);
    if (sent) {
      this.note(tab.page.scope, t("noteContinued"));
    }
    return sent ? "continue" : "failed";
  }

  /**
   * The HUD's "Check Herdr" (seed 000, "herdr监控"): read the bound workspace's live state now
   * (`/push/state` through bindings.refreshState, and the scope's task inbox, read and left
   * unacknowledged) and send it into conversation `convKey`'s tab, as Continue sends, in the same
   * per-conversation order. Refused (nothing sent) while Auto is on for the scope, like Continue,
   * and on a page bound to nothing: there is no workspace to read. Answers what happened: `check`,
   * or why not (`auto`, `unbound`, `busy`, `paused`, `handoff`, `no_tab`, `failed`).
   */
  check(convKey) {
    const previous = this.pumping.get(convKey) ?? Promise.resolve();
    const next = previous.then(async () => {
      const outcome = await this.checkOnce(convKey);
      const why = CHECK_REFUSED[outcome];
      const tab = this.tabs.forConv(convKey);
      if (why && tab) {
        this.tabs.post(tab, { type: "error", code: `check_${outcome}`, message: t(why) });
      }
      return outcome;
    });
    this.pumping.set(
      convKey,
      next.catch((error) => this.log.warn("herdr-mcp: Check Herdr failed", convKey, error.message)),
    );
    return next;
  }

  async checkOnce(convKey) {
    const tab = this.tabs.forConv(convKey);
    if (!tab) {
      return "no_tab";
    }
    const scope = tab.page.scope;
    const binding = this.bindings.get(scope);
    if (!binding) {
      return "unbound";
    }
    if ((await store.get(keys.auto(scope), false)) === true) {
      return "auto";
    }
    if (this.holds?.(convKey)) {
      return "handoff";
    }
    if ((await this.rateLimit.remaining(tab.page?.site)) > 0) {
      return "paused";
    }
    if (!tab.idle) {
      return "busy";
    }
    const state = await this.bindings.refreshState();
    const workspace = state.workspaces.find((item) => item.workspace_id === binding.workspace_id) ?? null;
    let inbox = [];
    if (!scope.includes(":root:")) {
      try {
        inbox = (await this.native.call("/browser/inbox.read", { scope })).items;
      } catch (error) {
        this.log.warn("herdr-mcp: inbox.read failed", error.message);
      }
    }
    const text = checkText({
      label: binding.label,
      workspaceId: binding.workspace_id,
      workspace,
      inbox,
      bridged: tab.page.site !== "chatgpt",
    });
    const sent = await this.send(tab, convKey, text);
    if (sent) {
      this.note(scope, t("noteChecked"));
    }
    this.broadcast();
    return sent ? "check" : "failed";
  }

  async send(tab, convKey, text) {
    const result = await this.tabs.send(tab, text);
    if (result.ok) {
      await store.remove(keys.uncertain(convKey));
      await this.rateLimit.confirmedSend(tab.page?.site);
      return true;
    }
    if (result.reason === "unconfirmed") {
      // Maybe sent, maybe not: nothing automatic until the person looks (manual continue clears it).
      await store.set(keys.uncertain(convKey), true);
      this.note(tab.page?.scope, t("noteUnconfirmed"));
    }
    this.broadcast();
    return false;
  }

  // ---- the HUD and the side panel

  note(scope, line) {
    if (scope) {
      this.notes.set(scope, { line, at: this.now() });
    }
  }

  async hudState(tab) {
    const page = tab.page;
    if (!page) {
      return { page: null };
    }
    const binding = this.bindings.get(page.scope);
    const workspace = binding ? await store.get(keys.workspace(binding.workspace_id), initialWorkspace()) : null;
    const wake = await store.get(keys.wake(page.scope), initialWake());
    const queue = page.convKey ? await store.get(keys.queue(page.convKey), []) : [];
    const pausedMs = await this.rateLimit.remaining(page.site);
    return {
      page,
      connected: this.native.connected,
      binding,
      working: Boolean(workspace?.working),
      auto: (await store.get(keys.auto(page.scope), false)) === true,
      wakePending: Boolean(wake.pending),
      queue: queue.map((entry) => entry.text),
      pausedMs,
      uncertain: page.convKey ? await store.get(keys.uncertain(page.convKey), false) : false,
      isTarget: Boolean(binding) && wakeTarget(page.scope, binding) === page.convKey,
      note: this.notes.get(page.scope) ?? null,
      handoff: this.handoffView?.(page.scope) ?? null,
    };
  }

  /**
   * Every tab's HUD state, once the current task is done: the changes of one event (or one pump)
   * make one update, and a wake's send is never queued behind HUD updates on its port.
   */
  broadcast() {
    if (this.broadcastTimer) {
      return;
    }
    this.broadcastTimer = setTimeout(() => {
      this.broadcastTimer = null;
      for (const tab of this.tabs.all()) {
        this.hudState(tab).then((state) => this.tabs.post(tab, { type: "hud", state }), () => {});
      }
    }, 0);
  }
}
