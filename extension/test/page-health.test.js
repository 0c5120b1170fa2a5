import assert from "node:assert/strict";
import { test } from "node:test";

import {
  EPISODE_QUIET_MS,
  PRESSURE_THRESHOLDS,
  RECORDS_KEPT,
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
  windowLevel,
} from "../src/lib/page-health.js";

test("budget: one page reload, then one tab reload, then rollover_recommended", () => {
  let health = startEpisode(emptyHealth(), { nowMs: 1, assistantId: null, fault: "server_ahead" });
  assert.equal(planReload(health.episode), "page_reload");
  health = record(health, { step: "page_reload", reason: "server_ahead", evidence: { a: 1 }, nowMs: 2 });
  assert.equal(planReload(health.episode), "tab_reload");
  health = record(health, { step: "tab_reload", reason: "server_ahead", nowMs: 3 });
  assert.equal(health.episode.pendingTabReload, 3);
  assert.equal(planReload(health.episode), "rollover_recommended");
  health = record(health, { step: "rollover_recommended", reason: "budget spent", nowMs: 4 });
  assert.equal(health.episode.state, "rollover_recommended");
  assert.deepEqual(health.records.map((r) => r.step), ["page_reload", "tab_reload", "rollover_recommended"]);
  assert.deepEqual(health.records[0].evidence, { a: 1 });
});

test("budget: Retry once per episode", () => {
  let health = emptyHealth();
  assert.equal(planRetry(health.episode), "retry");
  health = record(health, { step: "retry", reason: "not_accepted", nowMs: 1 });
  assert.equal(health.episode.retries, 1);
  assert.equal(planRetry(health.episode), "rollover_recommended");
});

test("records are bounded", () => {
  let health = emptyHealth();
  for (let i = 0; i < RECORDS_KEPT + 5; i += 1) {
    health = record(health, { step: "wait", reason: `stalled ${i}`, nowMs: i });
  }
  assert.equal(health.records.length, RECORDS_KEPT);
  assert.equal(health.records.at(-1).at, RECORDS_KEPT + 4);
});

test("the same fail-closed check again is counted, never pushing the steps out", () => {
  let health = record(emptyHealth(), { step: "page_reload", reason: "server ahead", nowMs: 1 });
  for (let i = 0; i < RECORDS_KEPT * 2; i += 1) {
    health = record(health, { step: "fail_closed", reason: "snapshot HTTP 500", nowMs: 10 + i });
  }
  assert.equal(health.records.length, 2);
  assert.equal(health.records[0].step, "page_reload");
  assert.deepEqual([health.records[1].count, health.records[1].first, health.records[1].at], [RECORDS_KEPT * 2, 10, 10 + RECORDS_KEPT * 2 - 1]);
  health = record(health, { step: "fail_closed", reason: "snapshot timed out", nowMs: 100 });
  assert.equal(health.records.length, 3);
});

test("an episode ends with real progress or after a quiet spell, never while faulty", () => {
  const { episode } = startEpisode(emptyHealth(), { nowMs: 0, assistantId: "a1", fault: "x" });
  assert.equal(episodeOver(episode, { nowMs: 1, assistantId: "a1", generating: false, faulty: false }), false);
  assert.equal(episodeOver(episode, { nowMs: 1, assistantId: "a2", generating: true, faulty: false }), false);
  assert.equal(episodeOver(episode, { nowMs: 1, assistantId: "a2", generating: false, faulty: false }), true);
  assert.equal(episodeOver(episode, { nowMs: EPISODE_QUIET_MS, assistantId: "a1", generating: false, faulty: false }), true);
  assert.equal(episodeOver(episode, { nowMs: EPISODE_QUIET_MS, assistantId: "a1", generating: false, faulty: true }), false);
  const stalled = startEpisode(emptyHealth(), { nowMs: 0, assistantId: "a1", assistantLength: 10, fault: "stalled" }).episode;
  const finishedLonger = { nowMs: 1, assistantId: "a1", assistantLength: 40, generating: false, faulty: false };
  assert.equal(episodeOver(stalled, finishedLonger), true, "the stalled message finished, longer");
  assert.equal(episodeOver(stalled, { ...finishedLonger, assistantLength: 10 }), false);
  assert.equal(episodeOver(stalled, { ...finishedLonger, generating: true }), false);
  const spent = { ...episode, state: "rollover_recommended" };
  assert.equal(episodeOver(spent, { nowMs: EPISODE_QUIET_MS * 3, assistantId: "a1", generating: false, faulty: false }), false);
  assert.equal(episodeOver(spent, { nowMs: 5, assistantId: "a3", generating: false, faulty: false }), true);
});

test("options are bounded with defaults", () => {
  assert.deepEqual(healthOptions({ staleAfterSec: 3, stalledAfterSec: "bad", stalledWaitSec: -1 }), {
    staleAfterSec: 3,
    stalledAfterSec: 120,
    stalledWaitSec: 60,
    snapshotTimeoutMs: 10_000,
  });
  assert.equal(healthOptions({ stalledWaitSec: "" }).stalledWaitSec, 60);
  assert.equal(healthOptions({ stalledWaitSec: "0" }).stalledWaitSec, 0);
});

test("window levels: ok, high by mutations, drift or long tasks, critical by heap", () => {
  const w = newWindow(0);
  assert.equal(windowLevel(w, 10_000).level, "ok");
  assert.deepEqual(windowLevel({ ...w, mutations: 4000 }, 10_000).reasons, ["mutations"]);
  assert.deepEqual(windowLevel({ ...w, maxDriftMs: 2000 }, 10_000).reasons, ["timer drift"]);
  assert.deepEqual(windowLevel({ ...w, longTaskMs: 3500 }, 10_000).reasons, ["long tasks"]);
  const heavy = windowLevel({ ...w, heapRatio: 0.9 }, 10_000);
  assert.equal(heavy.level, "critical");
  assert.equal(heavy.signals.heapRatio, 0.9);
});

test("a spike is only recorded; sustained pressure decides", () => {
  const high = windowLevel({ ...newWindow(0), mutations: 4000 }, 10_000);
  const ok = windowLevel(newWindow(0), 10_000);
  let meter = meterAfter(null, high);
  const quiet = { generating: true, noProgressMs: 600_000, staleAfterMs: 90_000, quietMs: 0, blocked: false };
  assert.equal(pressureDecision(meter, quiet), null);
  meter = meterAfter(meterAfter(meter, high), high);
  assert.equal(meter.consecutive, PRESSURE_THRESHOLDS.sustainedWindows);
  assert.equal(pressureDecision(meter, quiet), "check");
  assert.equal(pressureDecision(meter, { ...quiet, noProgressMs: 10_000 }), null);
  assert.equal(pressureDecision(meterAfter(meter, ok), quiet), null);
});

test("critical heap: maintenance reload only when still long enough and nothing blocks", () => {
  const critical = windowLevel({ ...newWindow(0), heapRatio: 0.95 }, 10_000);
  let meter = null;
  for (let i = 0; i < PRESSURE_THRESHOLDS.sustainedWindows; i += 1) {
    meter = meterAfter(meter, critical);
  }
  const idle = { generating: false, noProgressMs: 0, staleAfterMs: 90_000, quietMs: PRESSURE_THRESHOLDS.quietMs, blocked: false };
  assert.equal(pressureDecision(meter, idle), "maintenance_reload");
  assert.equal(pressureDecision(meter, { ...idle, blocked: true }), null);
  assert.equal(pressureDecision(meter, { ...idle, quietMs: 1_000 }), null);
  const high = windowLevel({ ...newWindow(0), mutations: 4000 }, 10_000);
  let highMeter = null;
  for (let i = 0; i < 5; i += 1) {
    highMeter = meterAfter(highMeter, high);
  }
  assert.equal(pressureDecision(highMeter, idle), null); // render pressure alone, idle: recorded only
});
