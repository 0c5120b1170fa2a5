import assert from "node:assert/strict";
import { test } from "node:test";

import { BACKOFF_STEPS_MS, initialBackoff, isPaused, on429, onConfirmedSend, remainingMs } from "../src/lib/backoff.js";

test("the schedule is 30 s, 60 s, 120 s and stays at 120 s", () => {
  assert.deepEqual(BACKOFF_STEPS_MS, [30_000, 60_000, 120_000]);
  let state = initialBackoff();
  let now = 1_000;
  const pauses = [];
  for (let index = 0; index < 5; index += 1) {
    state = on429(state, now);
    pauses.push(state.pausedUntil - now);
    now = state.pausedUntil + 1;
  }
  assert.deepEqual(pauses, [30_000, 60_000, 120_000, 120_000, 120_000]);
});

test("429s during a pause do not extend or escalate it (no storm)", () => {
  let state = on429(initialBackoff(), 0);
  const until = state.pausedUntil;
  for (let now = 100; now < 30_000; now += 1_000) {
    state = on429(state, now);
  }
  assert.equal(state.pausedUntil, until);
  assert.equal(state.level, 1);
  assert.ok(isPaused(state, 29_999));
  assert.ok(!isPaused(state, 30_000));
  assert.equal(remainingMs(state, 10_000), 20_000);
});

test("a confirmed send after the pause resets the ladder; one during it does not", () => {
  let state = on429(initialBackoff(), 0);
  state = on429(state, 30_001);
  assert.equal(state.level, 2);
  assert.equal(onConfirmedSend(state, 40_000).level, 2);
  state = onConfirmedSend(state, 90_002);
  assert.equal(state.level, 0);
  assert.equal(on429(state, 100_000).pausedUntil, 130_000);
});
