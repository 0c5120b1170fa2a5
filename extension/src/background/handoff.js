// Handoff: a conversation handed to a new conversation of the same scope, fail-closed (seed 000;
// the state machine is lib/handoff-state.js, this module does its I/O).
//
// Hand off (HUD) -> /browser/handoff.prepare (the runtime refuses while the workspace works) ->
// a new ChatGPT page in the same scope (the Project's home for a Project, the root page
// otherwise) -> its content script types the package's message (the seed) and reports the URL
// and whether a user turn carries the seed marker -> only with a new conversation id AND the
// marker: the cutover (a Project's active_conv_key, or a conversation scope's binding moved to
// the new conversation; Auto inherited; the queue moved in order; a pending wake moved). Every
// step is persisted under `handoff:<source scope>` first, so a restarted worker resumes it.
// While a transfer is in flight the source conversation's automatic sends wait. A cutover that
// fails midway (the runtime unreachable, say, at inbox.move) stays `confirmed` and is tried again:
// after 5 s, doubling to a minute, and at once when the native host says hello again (every
// step is idempotent).

import {
  FINISHED,
  IN_FLIGHT,
  afterRestart,
  controlLost,
  done,
  handoffOptions,
  migrateQueue,
  observed,
  opened,
  pastedSeen,
  prepared,
  refused,
  reopen,
  seeding,
  start,
  view,
} from "../lib/handoff-state.js";
import { conversationUrl, newConversationUrl, pageScope } from "../lib/scope.js";
import { t } from "../lib/i18n.js";
import * as keys from "../lib/storage-keys.js";
import * as store from "./store.js";

const POLL_MS = 100;
/** A probe of an existing conversation: long enough for a reloaded page to load its turns. */
const PROBE_MS = 10_000;
/** How long the new page's composer may take to become usable before the seed is typed. */
const IDLE_WAIT_MS = 15_000;

/** The first wait before a failed cutover is tried again; it doubles up to CUTOVER_RETRY_MAX_MS. */
export const CUTOVER_RETRY_MS = 5_000;
const CUTOVER_RETRY_MAX_MS = 60_000;

/** A handoff's step in words, in "handing off: ..." (the phases still under way). */
const PHASE_WORDS = {
  preparing: "handoffPhasePreparing",
  opening: "handoffPhaseOpening",
  seeding: "handoffPhaseSeeding",
  confirmed: "handoffPhaseConfirmed",
};

export class Handoff {
  constructor({ native, bindings, tabs, bridgeTabs = null, continuity, now = () => Date.now(), log = console }) {
    this.native = native;
    this.bindings = bindings;
    this.tabs = tabs;
    /** z.ai and DeepSeek pages (their bridge content script's raw "bridge-page" port). */
    this.bridgeTabs = bridgeTabs;
    this.continuity = continuity;
    this.now = now;
    this.log = log;
    /** scope -> record, for the synchronous checks of the pump. */
    this.records = new Map();
    this.running = new Map();
    this.requests = new Map();
    this.nextRequest = 1;
    this.restored = null;
    /** scope -> {timer, waitMs}: a failed cutover's next try. */
    this.retries = new Map();
  }

  // ---- what others ask

  /** True while conversation `convKey` is the source of a transfer in flight (its sends wait). */
  holds(convKey) {
    return [...this.records.values()].some((record) => record.sourceConvKey === convKey && IN_FLIGHT.includes(record.phase));
  }

  /** True while a transfer of `scope` is not finished (in flight or uncertain). */
  busy(scope) {
    const record = this.records.get(scope);
    return Boolean(record) && !FINISHED.includes(record.phase);
  }

  /** True while any transfer is not finished (an automatic rollover waits for it). */
  anyBusy() {
    return [...this.records.values()].some((record) => !FINISHED.includes(record.phase));
  }

  view(scope) {
    return view(this.records.get(scope) ?? null);
  }

  /** Load persisted transfers once (after a worker restart) and carry on with those in flight. */
  restore() {
    this.restored ??= (async () => {
      const all = await chrome.storage.local.get(null);
      for (const [name, record] of Object.entries(all)) {
        if (name.startsWith(keys.handoff.prefix) && record?.scope) {
          const after = afterRestart(record, this.now());
          await this.save(after);
          if (["preparing", "opening", "confirmed"].includes(after.phase)) {
            this.run(after.scope);
          }
        }
      }
    })().catch((error) => this.log.warn("herdr-mcp: restoring handoffs failed", error.message));
    return this.restored;
  }

  /** Hand off the conversation shown in `tab`. */
  async begin(tab) {
    await this.restore();
    const page = tab.page;
    const sourceUrl = conversationUrl(page);
    const auto = page ? (await store.get(keys.auto(page.scope), false)) === true : false;
    let record;
    await store.update(keys.handoff(page?.scope ?? "none"), null, (existing) => {
      record = start(existing, { page, sourceUrl, auto, now: this.now() });
      return record;
    });
    this.records.set(record.scope, record);
    // ChatGPT's 429 pause is ChatGPT's (ratelimit.js observes chatgpt.com only).
    const paused = (await this.continuity.rateLimit?.remaining(record.site)) ?? 0;
    if (paused > 0) {
      // The seed would meet the same 429: nothing is opened while sends are paused.
      const error = { code: "handoff_rate_limited", message: `ChatGPT answered 429: hand off again in ${Math.ceil(paused / 1000)} s.` };
      record = await this.save(refused(record, error, this.now()));
      this.note(record, describe(record));
      return record;
    }
    this.note(record, t("noteHandoffPreparing"));
    this.run(record.scope); // runs on; the HUD follows its phases
    return record;
  }

  /** "Resume handoff" of an uncertain transfer. */
  async resume(scope) {
    await this.restore();
    const record = this.records.get(scope);
    if (!record || record.phase !== "seed_uncertain") {
      throw Object.assign(new Error("No uncertain handoff to resume here."), { code: "handoff_not_uncertain" });
    }
    this.run(scope, { resume: true });
    return record;
  }

  /**
   * A page announced itself. The page being seeded moved to a conversation: that id is kept at
   * once (a restart mid-seed then knows where to look). An uncertain transfer whose target it
   * shows is probed (reconcile).
   */
  pageSeen(tab) {
    const convKey = tab.page?.convKey;
    for (const record of this.records.values()) {
      if (record.phase === "seeding" && record.targetTabId === tab.tabId && !record.targetConvKey) {
        const target = this.targetOf(record, tab.url);
        if (target) {
          this.save({ ...record, targetConvKey: target, updatedAt: this.now() });
        }
      }
      if (record.phase === "seed_uncertain" && convKey && record.targetConvKey === convKey && !this.running.has(record.scope)) {
        this.run(record.scope, { reconcileOnly: tab });
      }
      const fresh = convKey && convKey !== record.sourceConvKey && this.targetOf(record, tab.url);
      if (record.phase === "unavailable" && fresh && !this.running.has(record.scope)) {
        this.run(record.scope, { reconcileOnly: tab }); // the copy prompt pasted there by hand?
      }
    }
  }

  /** Replies of content scripts (`handoff.seeded`, `handoff.probed`). */
  reply(message) {
    const waiting = this.requests.get(message.id);
    if (waiting) {
      this.requests.delete(message.id);
      waiting(message);
    }
  }

  /** The native host said hello again (the runtime is reachable): failed cutovers go on now. */
  async retryCutovers() {
    await this.restore();
    for (const record of this.records.values()) {
      if (record.phase === "confirmed" && !this.running.has(record.scope)) {
        clearTimeout(this.retries.get(record.scope)?.timer);
        this.run(record.scope);
      }
    }
  }

  /** A step threw: a confirmed transfer (the cutover failed midway) is tried again later. */
  retryLater(scope, error) {
    const record = this.records.get(scope);
    if (record?.phase !== "confirmed") {
      return;
    }
    const previous = this.retries.get(scope);
    clearTimeout(previous?.timer);
    const waitMs = previous ? Math.min(previous.waitMs * 2, CUTOVER_RETRY_MAX_MS) : CUTOVER_RETRY_MS;
    const timer = setTimeout(() => {
      if (this.records.get(scope)?.phase === "confirmed" && !this.running.has(scope)) {
        this.run(scope);
      }
    }, waitMs);
    this.retries.set(scope, { timer, waitMs });
    this.note(record, t("noteCutoverRetry", error.code ?? "failed", error.message, Math.round(waitMs / 1000)));
  }

  // ---- the steps

  run(scope, options = {}) {
    const previous = this.running.get(scope) ?? Promise.resolve();
    const next = previous
      .then(() => this.step(scope, options))
      .catch((error) => {
        this.log.warn("herdr-mcp: handoff failed", scope, error.code ?? "", error.message);
        this.retryLater(scope, error);
      })
      .finally(() => {
        if (this.running.get(scope) === next) {
          this.running.delete(scope);
        }
        this.continuity.broadcast();
      });
    this.running.set(scope, next);
    return next;
  }

  async step(scope, { resume = false, reconcileOnly = null }) {
    let record = this.records.get(scope);
    if (reconcileOnly) {
      if (record?.phase === "seed_uncertain") {
        await this.probe(record, reconcileOnly, { resend: false });
      } else if (record?.phase === "unavailable") {
        await this.pasted(record, reconcileOnly);
      }
      return;
    }
    if (resume && record.phase === "seed_uncertain") {
      record = await this.resumeUncertain(record);
    }
    while (record && !["done", "seed_uncertain", "unavailable", "refused"].includes(record.phase)) {
      if (record.phase === "preparing") {
        record = await this.prepare(record);
      } else if (record.phase === "opening") {
        record = await this.open(record);
      } else if (record.phase === "confirmed") {
        record = await this.cutover(record);
      } else {
        // seeding outside of a request in this worker: the outcome is not known
        record = await this.save(observed(record, { convKey: null, markerSeen: false }, this.now()));
      }
    }
    if (record) {
      this.note(record, describe(record));
      if (record.phase !== "done") {
        this.continuity.pump(record.sourceConvKey); // what waited for the transfer goes to the source
      }
    }
  }

  async prepare(record) {
    try {
      const answer = await this.native.call("/browser/handoff.prepare", {
        scope: record.scope,
        transfer_id: record.transferId,
        source_url: record.sourceUrl,
      });
      return this.save(prepared(record, answer, this.now()));
    } catch (error) {
      return this.save(refused(record, error, this.now()));
    }
  }

  /** Open the new conversation page and seed it (phase opening -> seeding -> ...). */
  async open(record) {
    const options = handoffOptions(await store.get(keys.OPTIONS, {}));
    const url = record.kind === "project" ? `https://chatgpt.com/g/${record.projectId}/project` : newConversationUrl(record.site);
    let tabId;
    try {
      tabId = (await chrome.tabs.create({ url, active: true })).id;
    } catch (error) {
      return this.save(controlLost(record, { code: "handoff_tab_failed", message: `A new tab could not be opened: ${error.message}` }, this.now()));
    }
    record = await this.save(opened(record, tabId, this.now()));
    const tab = await this.connected(tabId, options.connectDeadlineSec * 1000, (page) => page !== null);
    if (!tab) {
      chrome.tabs.remove(tabId).catch(() => {});
      return this.save(
        controlLost(
          record,
          { code: "handoff_page_unreachable", message: `The new ${record.site} page did not answer within ${options.connectDeadlineSec} s.` },
          this.now(),
        ),
      );
    }
    return this.seed(record, tab, options);
  }

  /** Hand the seed to `tab`'s content script and judge what it saw. */
  async seed(record, tab, options) {
    record = await this.save(seeding(record, this.now()));
    const deadlineMs = options.seedDeadlineSec * 1000;
    const answer = await this.request(tab, { type: "handoff.seed", text: record.message, marker: record.marker, idleMs: IDLE_WAIT_MS, deadlineMs }, IDLE_WAIT_MS + deadlineMs + 10_000);
    if (!answer) {
      return this.save(controlLost(record, { code: "handoff_page_lost", message: "The new page went away while the seed was sent." }, this.now()));
    }
    if (!answer.typed) {
      return this.save(
        controlLost(record, { code: "handoff_page_busy", message: `The new page could not take the seed (${answer.reason}).` }, this.now(), {
          notTyped: true,
        }),
      );
    }
    return this.save(observed(record, { convKey: this.targetOf(record, answer.url), markerSeen: Boolean(answer.markerSeen) }, this.now()));
  }

  /**
   * Resume: probe the target conversation (reloaded, so the page shows what the site has); the
   * marker found -> confirmed; confirmed absent -> the seed again into that conversation. Without
   * a known target conversation, a new page again.
   */
  async resumeUncertain(record) {
    const options = handoffOptions(await store.get(keys.OPTIONS, {}));
    if (!record.targetConvKey) {
      return this.save(reopen(record, this.now()));
    }
    let tab = this.tabsOf(record.site).forConv(record.targetConvKey);
    let tabId;
    try {
      if (tab) {
        tabId = tab.tabId;
        await chrome.tabs.reload(tabId);
      } else {
        const page = { site: record.site, convKey: record.targetConvKey, projectId: record.projectId };
        tabId = (await chrome.tabs.create({ url: conversationUrl(page), active: true })).id;
      }
    } catch (error) {
      return this.save({ ...record, error: { code: "handoff_tab_failed", message: error.message }, updatedAt: this.now() });
    }
    tab = await this.connected(tabId, options.connectDeadlineSec * 1000, (page) => page?.convKey === record.targetConvKey, tab);
    if (!tab) {
      return this.save({
        ...record,
        error: { code: "handoff_page_unreachable", message: "The target conversation did not answer; resume again later." },
        updatedAt: this.now(),
      });
    }
    return this.probe(record, tab, { resend: true, options });
  }

  async probe(record, tab, { resend, options = null }) {
    const answer = await this.request(tab, { type: "handoff.probe", marker: record.marker, deadlineMs: PROBE_MS }, PROBE_MS + 5_000);
    if (answer?.markerSeen) {
      record = await this.save(observed(record, { convKey: this.targetOf(record, answer.url), markerSeen: true }, this.now()));
      if (record.phase === "confirmed") {
        return this.cutover(record);
      }
      return record;
    }
    if (!resend || !answer) {
      return record;
    }
    return this.seed(record, tab, options ?? handoffOptions(await store.get(keys.OPTIONS, {})));
  }

  /** A new conversation of the scope may hold the copy prompt the person pasted: probe, never type. */
  async pasted(record, tab) {
    const answer = await this.request(tab, { type: "handoff.probe", marker: record.marker, deadlineMs: PROBE_MS }, PROBE_MS + 5_000);
    const target = answer?.markerSeen ? this.targetOf(record, answer.url) : null;
    if (!target) {
      return record;
    }
    record = await this.save(pastedSeen(record, target, this.now()));
    return record.phase === "confirmed" ? this.cutover(record) : record;
  }

  /** The conversation a target page is on, when it belongs where the transfer goes. */
  targetOf(record, url) {
    const page = url ? pageScope(url) : null;
    if (!page?.convKey) {
      return null;
    }
    if (record.kind === "project") {
      return page.scope === record.scope ? page.convKey : null;
    }
    return page.kind === "conv" && page.site === record.site ? page.convKey : null;
  }

  /** The cutover, each step idempotent (a restart in the middle does them again). */
  async cutover(record) {
    const target = record.targetConvKey;
    const binding = this.bindings.get(record.scope);
    let targetScope = record.scope;
    if (record.continuityId) {
      // First, before the target is bound: the journal takes a bound conversation's turns at
      // once, and they must land in the source's chain, never start one of their own.
      await store.set(keys.chain(target), record.continuityId);
    }
    if (record.kind === "project") {
      if (binding) {
        await this.bindings.set(record.scope, binding.workspace_id, { label: binding.label, active_conv_key: target });
      }
    } else {
      targetScope = `${record.site}:conv:${target}`;
      // The old scope's unacknowledged task outcomes (and tasks still running for it) belong to
      // the new conversation now, or they would never be acknowledged (idempotent: again moves none).
      await this.native.call("/browser/inbox.move", { from_scope: record.scope, to_scope: targetScope });
      if (binding) {
        await this.bindings.set(targetScope, binding.workspace_id, { label: binding.label });
        await this.bindings.set(record.scope, null);
      }
      if (record.auto) {
        await store.set(keys.auto(targetScope), true);
      }
      if (record.site !== "chatgpt" && (await store.get(keys.bridgeDispatched(record.scope), null)) !== null) {
        // The source used the tools through the bridge: the new conversation gets the protocol
        // prompt once, after its seed (continuity.js sends it before anything else).
        await store.set(keys.prime(target), true);
      }
      const wake = await store.get(keys.wake(record.scope), null);
      if (wake && (await store.get(keys.wake(targetScope), null)) === null) {
        await store.set(keys.wake(targetScope), wake);
      }
      await store.remove(keys.wake(record.scope));
    }
    const source = await store.get(keys.queue(record.sourceConvKey), []);
    if (source.length > 0) {
      await store.update(keys.queue(target), [], (queue) => migrateQueue(queue, source));
      await store.remove(keys.queue(record.sourceConvKey));
    }
    record = await this.save(done(record, this.now()));
    clearTimeout(this.retries.get(record.scope)?.timer);
    this.retries.delete(record.scope);
    this.continuity.note(targetScope, t("noteHandedOffFrom", record.sourceConvKey));
    this.continuity.pump(target);
    return record;
  }

  // ---- plumbing

  async save(record) {
    this.records.set(record.scope, record);
    await store.set(keys.handoff(record.scope), record);
    this.continuity.broadcast();
    return record;
  }

  note(record, line) {
    this.continuity.note(record.scope, line);
    this.continuity.broadcast();
  }

  /** The registry of `site`'s connected pages (ChatGPT's content script, or the bridge's). */
  tabsOf(site) {
    return site === "chatgpt" || !this.bridgeTabs ? this.tabs : this.bridgeTabs;
  }

  tabById(tabId) {
    return this.tabs.byId.get(tabId) ?? this.bridgeTabs?.byId.get(tabId) ?? null;
  }

  /** The connected content script of tab `tabId` once `ready(page)` holds; null after `ms`. */
  async connected(tabId, ms, ready, stale = null) {
    const until = this.now() + ms;
    while (this.now() < until) {
      const tab = this.tabById(tabId);
      if (tab && tab !== stale && ready(tab.page)) {
        return tab;
      }
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
    return null;
  }

  /** Ask a content script; its answer, or null when it went away or did not answer in `ms`. */
  request(tab, message, ms) {
    const id = `h${this.nextRequest++}`;
    return new Promise((resolve) => {
      const finish = (answer) => {
        clearTimeout(timer);
        clearInterval(watch);
        this.requests.delete(id);
        resolve(answer);
      };
      const timer = setTimeout(() => finish(null), ms);
      const watch = setInterval(() => {
        if (this.tabById(tab.tabId) !== tab) {
          finish(null);
        }
      }, 500);
      this.requests.set(id, finish);
      this.tabs.post(tab, { ...message, id });
    });
  }
}

function describe(record) {
  switch (record.phase) {
    case "done":
      return t("noteHandedOffTo", record.targetConvKey);
    case "seed_uncertain":
      return t("noteHandoffUncertain", record.phase, record.error?.message ?? "");
    case "unavailable":
      return t("noteHandoffUnavailable", record.error?.code);
    case "refused":
      return t("noteHandoffRefused", record.error?.code, record.error?.message ?? "");
    default:
      return t("noteHandingOff", PHASE_WORDS[record.phase] ? t(PHASE_WORDS[record.phase]) : record.phase);
  }
}
