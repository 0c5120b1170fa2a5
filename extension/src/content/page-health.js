// Stale-view and page-health recovery for a bound ChatGPT conversation (seed 000: "页面卡住",
// "页面健康自恢复"), in the content script. Evidence first: when a reply has shown as
// generating with no DOM change for `staleAfterSec`, or ChatGPT shows "message send timed
// out", the page's own conversation snapshot decides (lib/stale-view.js); every reload and
// Retry comes out of one episode's budget (lib/page-health.js) and is recorded in
// chrome.storage.local `health:<conv key>` before it is taken. The UI-pressure meter runs in
// fixed 10 s windows. The original message is never sent again. All DOM and site knowledge is
// in chatgpt-dom.js.

import * as dom from "./chatgpt-dom.js";
import { NOT_ACCEPTED, SERVER_AHEAD, STALLED, SYNCED, classify, timeoutAction } from "../lib/stale-view.js";
import {
  WINDOW_MS,
  closeEpisode,
  emptyHealth,
  episodeOver,
  healthOptions,
  meterAfter,
  newWindow,
  planReload,
  planRetry,
  pressureDecision,
  record,
  startEpisode,
  sustained,
  windowLevel,
} from "../lib/page-health.js";
import { t } from "../lib/i18n.js";
import * as keys from "../lib/storage-keys.js";

const TICK_MS = 1_000;

/** The recovery steps a person is told about: the catalog's name of each one's text. */
const STEP_TEXT = {
  page_reload: "healthStepPageReload",
  tab_reload: "healthStepTabReload",
  retry: "healthStepRetry",
};

export class PageHealth {
  constructor({ hud, post, busy }) {
    this.hud = hud;
    this.post = post;
    this.busy = busy;
    this.state = null;
    this.options = healthOptions();
    this.checking = false;
    this.lastSignature = null;
    this.lastChangeAt = Date.now();
    this.lastProgressAt = Date.now();
    this.lastCheckAt = 0;
    this.stalledSince = null;
    this.handledErrors = new WeakSet(); // thread error elements already acted on
    this.window = newWindow(Date.now());
    this.meter = null;
    this.lastTick = Date.now();
    this.convKey = null;
    this.health = null;
  }

  start() {
    chrome.storage.local.get(keys.OPTIONS).then((found) => (this.options = healthOptions(found[keys.OPTIONS] ?? {})));
    chrome.storage.onChanged.addListener((changes, area) => {
      if (area === "local" && changes[keys.OPTIONS]) {
        this.options = healthOptions(changes[keys.OPTIONS].newValue ?? {});
      }
    });
    new MutationObserver((records) => {
      this.window.mutations += records.length; // O(1) per callback: the rate is read per window
    }).observe(document.documentElement, { childList: true, subtree: true, characterData: true });
    try {
      new PerformanceObserver((list) => {
        for (const entry of list.getEntries()) {
          this.window.longTaskMs += entry.duration;
        }
      }).observe({ type: "longtask", buffered: false }); // the page's own load is not pressure
    } catch {
      // no Long Tasks API here: the meter goes on without it
    }
    setInterval(() => this.tick(), TICK_MS);
  }

  /** The worker's HUD state for this tab: the binding, Auto, the page's conversation. */
  update(state) {
    this.state = state;
    const convKey = state?.page?.convKey && state?.binding ? state.page.convKey : null;
    if (convKey !== this.convKey) {
      this.convKey = convKey;
      this.health = null;
      if (convKey) {
        this.load(convKey);
      }
    }
  }

  get key() {
    return keys.health(this.convKey);
  }

  async load(convKey) {
    const name = keys.health(convKey);
    const found = (await chrome.storage.local.get(name))[name];
    if (this.convKey !== convKey) {
      return;
    }
    this.health = found ?? emptyHealth();
    const last = this.health.records.at(-1);
    if (this.health.episode?.state === "rollover_recommended") {
      this.show(t("healthRolloverRecommended", "rollover_recommended", last?.reason ?? "?"));
    } else if (this.health.episode && last && STEP_TEXT[last.step]) {
      this.show(t("healthWatching", t(STEP_TEXT[last.step]), last.reason));
    }
  }

  async save() {
    await chrome.storage.local.set({ [this.key]: this.health });
  }

  show(text) {
    this.hud.setHealth(text);
  }

  tick() {
    const now = Date.now();
    this.window.ticks += 1;
    if (document.visibilityState === "visible") {
      // A hidden tab's timers are throttled by Chrome on purpose: that is not page pressure.
      this.window.maxDriftMs = Math.max(this.window.maxDriftMs, now - this.lastTick - TICK_MS);
    }
    this.lastTick = now;
    if (now - this.window.startMs >= WINDOW_MS) {
      this.closeWindow(now);
    }
    const view = dom.assistantView();
    const signature = `${view.assistantId}:${view.assistantLength}:${view.generating}:${dom.lastUserId()}`;
    if (signature !== this.lastSignature) {
      const grew = this.lastSignature !== null && !signature.startsWith(`${view.assistantId}:${view.assistantLength}:`);
      this.lastSignature = signature;
      this.lastChangeAt = now;
      if (grew) {
        this.lastProgressAt = now;
      }
      this.stalledSince = view.generating ? this.stalledSince : null;
    }
    if (!this.convKey || !this.health || this.checking || this.busy()) {
      return;
    }
    if (this.state?.handoff?.inFlight || this.state?.pausedMs > 0) {
      return; // a handoff drives this page, or ChatGPT answered 429: no requests, no reloads
    }
    this.maybeCloseEpisode(view, now);
    this.act(view, now).catch((error) => this.show(t("healthCheckFailed", error.message)));
  }

  closeWindow(now) {
    const heap = performance.memory;
    if (heap?.jsHeapSizeLimit) {
      this.window.heapRatio = heap.usedJSHeapSize / heap.jsHeapSizeLimit;
    }
    const result = windowLevel(this.window, now);
    this.meter = meterAfter(this.meter, result);
    this.window = newWindow(now);
    if (result.level !== "ok" && this.convKey && this.health) {
      // A spike is only recorded (the newest one, apart from the steps' records).
      this.health = { ...this.health, pressure: { at: now, ...result, consecutive: this.meter.consecutive } };
      this.save();
      this.show(t("healthPressure", result.level, result.reasons.join(", "), this.meter.consecutive));
    }
  }

  maybeCloseEpisode(view, now) {
    const faulty = view.generating && now - this.lastChangeAt >= this.options.staleAfterSec * 1000;
    if (episodeOver(this.health.episode, { nowMs: now, ...view, faulty })) {
      const steps = this.health.records.filter((entry) => entry.at >= this.health.episode.startedAt && STEP_TEXT[entry.step]);
      this.health = closeEpisode(this.health);
      this.save();
      this.show(steps.length ? t("healthRecovered", steps.map((entry) => t(STEP_TEXT[entry.step])).join(", ")) : "");
    }
  }

  async act(view, now) {
    if (this.health.episode?.state === "rollover_recommended") {
      return; // nothing more is done; the state is shown (a handoff is the person's or rollover's)
    }
    const error = dom.sendTimedOut();
    if (error && !this.handledErrors.has(error.element)) {
      // Each error once; a new one (a Retry that timed out again) meets the spent budget.
      this.handledErrors.add(error.element);
      await this.guarded(() => this.sendTimedOut(view, error.text));
      return;
    }
    const staleMs = this.options.staleAfterSec * 1000;
    const pressure = pressureDecision(this.meter, {
      generating: view.generating,
      noProgressMs: now - this.lastProgressAt,
      staleAfterMs: staleMs,
      quietMs: now - this.lastChangeAt,
      blocked: sustained(this.meter) ? this.blocked() : true, // read only when it can matter
    });
    if (pressure === "maintenance_reload") {
      await this.guarded(() => this.reload("critical heap, page still", { meter: this.meter?.last ?? null }, view));
      return;
    }
    if (!view.generating) {
      return;
    }
    const waitMs = this.stalledSince ? this.options.stalledWaitSec * 1000 : staleMs;
    const due = (now - this.lastChangeAt >= staleMs || pressure === "check") && now - this.lastCheckAt >= waitMs;
    if (due) {
      await this.guarded(() => this.staleCheck(view));
    }
  }

  blocked() {
    const signals = dom.pressureSignals();
    return signals.draft || signals.card || this.busy() || Boolean(this.state?.uncertain);
  }

  async guarded(work) {
    this.checking = true;
    try {
      await work();
    } finally {
      this.checking = false;
      this.lastCheckAt = Date.now();
    }
  }

  async snapshot() {
    const id = dom.conversationId();
    if (!id) {
      return { ok: false, reason: "no conversation id in the URL" };
    }
    return dom.readSnapshot(id, this.options.snapshotTimeoutMs);
  }

  async staleCheck(view) {
    const snap = await this.snapshot();
    const now = Date.now();
    const result = classify(snap.ok ? snap.json : null, view, { nowMs: now, stalledAfterMs: this.options.stalledAfterSec * 1000 });
    const reason = snap.ok ? result.reason : `snapshot ${snap.reason}`;
    const evidence = { ...result.evidence, snapshot: snap.ok ? "read" : snap.reason };
    switch (result.kind) {
      case SYNCED:
        this.stalledSince = null;
        this.show(t("healthSynced", Math.round((now - this.lastChangeAt) / 1000)));
        return;
      case SERVER_AHEAD:
        await this.reload(`server ahead: ${reason}`, evidence, view);
        return;
      case STALLED:
        if (this.stalledSince === null) {
          this.stalledSince = now;
          this.begin(view, "stalled");
          this.health = record(this.health, { step: "wait", reason: `server stalled: ${reason}`, evidence, nowMs: now });
          await this.save();
          this.show(t("healthStalledWait", this.options.stalledWaitSec));
        } else if (now - this.stalledSince >= this.options.stalledWaitSec * 1000) {
          await this.reload(`server stalled: ${reason}`, evidence, view);
        }
        return;
      case NOT_ACCEPTED:
        await this.retry(reason, evidence, view);
        return;
      default:
        await this.failClosed(reason, evidence, view);
    }
  }

  async sendTimedOut(view, errorText) {
    const snap = await this.snapshot();
    const decision = timeoutAction(snap.ok ? snap.json : null);
    const evidence = { dom: view, error: errorText, snapshot: snap.ok ? "read" : snap.reason, kind: decision.kind };
    const reason = `message send timed out: ${snap.ok ? decision.reason : `snapshot ${snap.reason}, view sync only`}`;
    if (decision.action === "retry") {
      await this.retry(reason, evidence, view);
    } else {
      await this.reload(reason, evidence, view);
    }
  }

  begin(view, fault) {
    this.health = startEpisode(this.health, { nowMs: Date.now(), assistantId: view.assistantId, assistantLength: view.assistantLength, fault });
  }

  async failClosed(reason, evidence, view) {
    this.begin(view, "unknown");
    this.health = record(this.health, { step: "fail_closed", reason, evidence, nowMs: Date.now() });
    await this.save();
    this.show(t("healthFailClosed", reason));
  }

  async recommendRollover(reason, evidence) {
    this.health = record(this.health, { step: "rollover_recommended", reason, evidence, nowMs: Date.now() });
    await this.save();
    this.show(t("healthRolloverRecommended", "rollover_recommended", reason));
    // The worker decides: auto rollover when it is on and its preconditions hold, else Hand off.
    this.post({ type: "health.rollover", convKey: this.convKey, metrics: dom.pressureSignals() });
  }

  /** One reload out of the budget: the page's own, then the tab's (by the worker), then none. */
  async reload(reason, evidence, view) {
    this.begin(view, reason);
    evidence = { ...evidence, pressure: this.meter?.last ?? null };
    const step = planReload(this.health.episode);
    if (step === "rollover_recommended") {
      await this.recommendRollover(reason, evidence);
      return;
    }
    this.health = record(this.health, { step, reason, evidence, nowMs: Date.now() });
    await this.save(); // recorded before navigating: a reload never repeats itself
    this.show(step === "page_reload" ? t("healthReloadPage", reason) : t("healthReloadTab", reason));
    if (step === "page_reload") {
      location.reload();
    } else {
      this.post({ type: "health.tabReload", convKey: this.convKey, at: this.health.episode.pendingTabReload });
    }
  }

  /** ChatGPT's own Retry, once per episode; never a resend of the message. */
  async retry(reason, evidence, view) {
    this.begin(view, "not_accepted");
    if (planRetry(this.health.episode) !== "retry") {
      await this.recommendRollover(`${reason}; Retry already used`, evidence);
      return;
    }
    const button = dom.retryButton();
    if (!button) {
      await this.failClosed(`${reason}; no Retry button on the page`, evidence, view);
      return;
    }
    this.health = record(this.health, { step: "retry", reason, evidence, nowMs: Date.now() });
    await this.save();
    this.show(t("healthPressRetry", reason));
    button.click();
  }

  /** The worker refused the tab reload (Auto off, another conversation, no matching record). */
  async tabReloadRefused(reason) {
    if (this.health?.episode) {
      await this.recommendRollover(`tab reload refused: ${reason}`, null);
    }
  }
}
