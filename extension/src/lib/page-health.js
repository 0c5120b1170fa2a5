// Page health, pure: the recovery budget of one episode and the UI-pressure meter's windows
// (seed 000, "页面健康自恢复"). An episode starts at the first fault of a conversation and
// allows at most one page reload (location.reload), one tab reload (chrome.tabs.reload) and one
// ChatGPT Retry; with the reloads spent, the episode is `rollover_recommended` and nothing more
// is done. Every step is recorded (reason and evidence) before it is taken.

export const BUDGET = Object.freeze({ pageReloads: 1, tabReloads: 1, retries: 1 });
export const RECORDS_KEPT = 20;
/** An episode with no fault and no step for this long is over (its records stay). */
export const EPISODE_QUIET_MS = 10 * 60_000;

export const DEFAULT_HEALTH_OPTIONS = Object.freeze({
  staleAfterSec: 90, // a reply shown as generating with no DOM change this long -> read the snapshot
  stalledAfterSec: 120, // the server's message in progress with no update this long -> stalled
  stalledWaitSec: 60, // stalled: wait this long, then (still stalled) reload
  snapshotTimeoutMs: 10_000,
});

function bounded(value, low, high, fallback) {
  if (value === "" || value === null || value === undefined) {
    return fallback; // Number("") would be 0
  }
  const number = Number(value);
  return Number.isFinite(number) && number >= low && number <= high ? number : fallback;
}

export function healthOptions(options = {}) {
  const d = DEFAULT_HEALTH_OPTIONS;
  return {
    staleAfterSec: bounded(options.staleAfterSec, 1, 3600, d.staleAfterSec),
    stalledAfterSec: bounded(options.stalledAfterSec, 1, 3600, d.stalledAfterSec),
    stalledWaitSec: bounded(options.stalledWaitSec, 0, 3600, d.stalledWaitSec),
    snapshotTimeoutMs: bounded(options.snapshotTimeoutMs, 100, 120_000, d.snapshotTimeoutMs),
  };
}

// ---- the episode budget

export function emptyHealth() {
  return { episode: null, records: [] };
}

export function startEpisode(health, { nowMs, assistantId, assistantLength = 0, fault }) {
  if (health.episode) {
    return health;
  }
  const episode = {
    startedAt: nowMs,
    lastAt: nowMs,
    startAssistantId: assistantId ?? null,
    startAssistantLength: assistantLength,
    fault,
    pageReloads: 0,
    tabReloads: 0,
    retries: 0,
    state: "open",
  };
  return { ...health, episode };
}

/** The next reload step the budget allows: page_reload, then tab_reload, then rollover_recommended. */
export function planReload(episode) {
  if (!episode || episode.pageReloads < BUDGET.pageReloads) {
    return "page_reload";
  }
  if (episode.tabReloads < BUDGET.tabReloads) {
    return "tab_reload";
  }
  return "rollover_recommended";
}

/** ChatGPT's Retry once per episode; after that the episode is rollover_recommended. */
export function planRetry(episode) {
  return !episode || episode.retries < BUDGET.retries ? "retry" : "rollover_recommended";
}

/** Record `step` (page_reload, tab_reload, retry, rollover_recommended, or a note such as fail_closed). */
export function record(health, { step, reason, evidence, nowMs }) {
  let episode = health.episode ?? startEpisode(health, { nowMs, fault: step }).episode;
  episode = { ...episode, lastAt: nowMs };
  if (step === "page_reload") {
    episode.pageReloads += 1;
  } else if (step === "tab_reload") {
    episode.tabReloads += 1;
    episode.pendingTabReload = nowMs;
  } else if (step === "retry") {
    episode.retries += 1;
  } else if (step === "rollover_recommended") {
    episode.state = "rollover_recommended";
  }
  const entry = { at: nowMs, step, reason, evidence: evidence ?? null };
  const last = health.records.at(-1);
  if (step === "fail_closed" && last?.step === step && last.reason === reason) {
    // The same fail-closed check again: counted on its record, so repeats never push the
    // steps' records out of the bounded list.
    const repeated = { ...entry, first: last.first ?? last.at, count: (last.count ?? 1) + 1 };
    return { episode, records: [...health.records.slice(0, -1), repeated] };
  }
  return { episode, records: [...health.records, entry].slice(-RECORDS_KEPT) };
}

/**
 * Whether the open episode is over: the page shows, not generating, a finished assistant message
 * other than the one it started with, or that one grown (real progress), or nothing happened for
 * EPISODE_QUIET_MS. A rollover_recommended episode stays until real progress.
 */
export function episodeOver(episode, { nowMs, assistantId, assistantLength = 0, generating, faulty }) {
  if (!episode) {
    return false;
  }
  const grown = assistantId === episode.startAssistantId && assistantLength > (episode.startAssistantLength ?? Infinity);
  const progressed = !generating && !faulty && assistantId !== null && (assistantId !== episode.startAssistantId || grown);
  if (progressed) {
    return true;
  }
  return episode.state !== "rollover_recommended" && !faulty && nowMs - episode.lastAt >= EPISODE_QUIET_MS;
}

export function closeEpisode(health) {
  return { ...health, episode: null };
}

// ---- the UI-pressure meter: fixed windows of O(1) aggregates

export const WINDOW_MS = 10_000;
export const PRESSURE_THRESHOLDS = Object.freeze({
  mutationsPerSec: 300, // DOM mutation records seen by the MutationObserver
  driftMs: 1_500, // the worst lateness of a 1 s timer in the window
  longTaskShare: 0.3, // share of the window spent in long tasks
  heapRatio: 0.85, // usedJSHeapSize / jsHeapSizeLimit: critical
  sustainedWindows: 3, // high this many windows in a row -> sustained
  quietMs: 60_000, // critical heap: the page must be still this long before a maintenance reload
});

export function newWindow(startMs) {
  return { startMs, mutations: 0, ticks: 0, maxDriftMs: 0, longTaskMs: 0, heapRatio: null };
}

/** Level of one closed window: ok, high (main thread or render pressure) or critical (heap). */
export function windowLevel(window, endMs, t = PRESSURE_THRESHOLDS) {
  const seconds = Math.max(1, endMs - window.startMs) / 1000;
  const signals = {
    mutationsPerSec: Math.round(window.mutations / seconds),
    ticks: window.ticks,
    maxDriftMs: Math.round(window.maxDriftMs),
    longTaskShare: Math.round((window.longTaskMs / (seconds * 1000)) * 100) / 100,
    heapRatio: window.heapRatio === null ? null : Math.round(window.heapRatio * 1000) / 1000,
  };
  const reasons = [];
  if (signals.mutationsPerSec >= t.mutationsPerSec) {
    reasons.push("mutations");
  }
  if (signals.maxDriftMs >= t.driftMs) {
    reasons.push("timer drift");
  }
  if (signals.longTaskShare >= t.longTaskShare) {
    reasons.push("long tasks");
  }
  let level = reasons.length > 0 ? "high" : "ok";
  if (signals.heapRatio !== null && signals.heapRatio >= t.heapRatio) {
    reasons.push("heap");
    level = "critical";
  }
  return { level, reasons, signals };
}

/** The meter after one more closed window: consecutive windows at high or worse. */
export function meterAfter(meter, result) {
  const bad = result.level !== "ok";
  const consecutive = bad ? (meter?.consecutive ?? 0) + 1 : 0;
  return { consecutive, last: result, okWindows: bad ? 0 : (meter?.okWindows ?? 0) + 1 };
}

export function sustained(meter, t = PRESSURE_THRESHOLDS) {
  return (meter?.consecutive ?? 0) >= t.sustainedWindows;
}

/**
 * What the meter asks for, alone (a spike is only recorded):
 *   - while a reply is generating: sustained pressure with no assistant progress for half the
 *     stale delay -> "check" early (the snapshot must still prove the server ahead before any
 *     reload);
 *   - not generating: critical heap, sustained, the page still for quietMs and nothing blocking
 *     (a draft, a card, a send in flight, an unconfirmed delivery) -> "maintenance_reload";
 *   - otherwise null.
 */
export function pressureDecision(meter, { generating, noProgressMs, staleAfterMs, quietMs, blocked }, t = PRESSURE_THRESHOLDS) {
  if (!sustained(meter, t)) {
    return null;
  }
  if (generating) {
    return noProgressMs >= staleAfterMs / 2 ? "check" : null;
  }
  if (meter.last?.level === "critical" && !blocked && quietMs >= t.quietMs) {
    return "maintenance_reload";
  }
  return null;
}
