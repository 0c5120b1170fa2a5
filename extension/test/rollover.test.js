import assert from "node:assert/strict";
import { test } from "node:test";

import { DEFAULTS, MIN_MESSAGES, decide, decideRecommended, estimateTokens, nextFloor, pressure, rolloverOptions } from "../src/lib/rollover.js";

const READY = {
  ratio: 0.9,
  messages: 10,
  auto: true,
  working: false,
  generating: false,
  card: false,
  draft: false,
  uncertain: false,
  handoffBusy: false,
};

test("rollover is off by default, and the options are bounded", () => {
  assert.equal(rolloverOptions({}).rolloverAuto, false);
  assert.deepEqual(rolloverOptions(undefined), { ...DEFAULTS });
  assert.equal(rolloverOptions({ rolloverAuto: "yes" }).rolloverAuto, false, "only true turns it on");
  assert.equal(rolloverOptions({ rolloverThreshold: 3 }).rolloverThreshold, DEFAULTS.rolloverThreshold);
  assert.equal(rolloverOptions({ rolloverContextTokens: 0 }).rolloverContextTokens, DEFAULTS.rolloverContextTokens);
  assert.equal(rolloverOptions({ rolloverReserveTokens: 0 }).rolloverReserveTokens, 0);
});

test("tokens: about four characters each, one per CJK character", () => {
  assert.equal(estimateTokens(""), 0);
  assert.equal(estimateTokens("abcdefgh"), 2);
  assert.equal(estimateTokens("接力流程"), 4);
  assert.equal(estimateTokens("接力 ok"), 3);
});

test("messages the page does not show count at the visible average; the floor never drops", () => {
  const turns = [
    { role: "user", text: "a".repeat(400) },
    { role: "assistant", text: "b".repeat(400) },
  ];
  const options = rolloverOptions({ rolloverContextTokens: 10_000, rolloverReserveTokens: 1_000 });
  const shown = pressure(turns, nextFloor(0, 2, 0), options);
  assert.deepEqual(shown, { messages: 2, hiddenMessages: 0, tokens: 1_200, ratio: 0.12 });
  const floor = nextFloor(0, 2, 40); // the page names turn 40: 38 are virtualised away
  const hidden = pressure(turns, floor, options);
  assert.equal(hidden.hiddenMessages, 38);
  assert.equal(hidden.tokens, 200 + 38 * 100 + 1_000);
  assert.equal(nextFloor(floor, 2, 0), 40, "a later look that shows less keeps the floor");
});

test("every precondition blocks, and all failing ones are named", () => {
  const on = rolloverOptions({ rolloverAuto: true });
  assert.deepEqual(decide(READY, on), { go: true, blocked: [] });
  assert.deepEqual(decide(READY, rolloverOptions({})).blocked, ["rollover_off"]);
  assert.deepEqual(decide({ ...READY, ratio: 0.5 }, on).blocked, ["pressure_low"]);
  for (const [field, reason] of [
    ["working", "workspace_working"],
    ["generating", "streaming"],
    ["card", "card_pending"],
    ["draft", "draft"],
    ["uncertain", "send_uncertain"],
    ["handoffBusy", "handoff_in_progress"],
  ]) {
    assert.deepEqual(decide({ ...READY, [field]: true }, on), { go: false, blocked: [reason] }, field);
  }
  assert.deepEqual(decide({ ...READY, auto: false }, on).blocked, ["auto_off"]);
  assert.deepEqual(decide({ ...READY, messages: MIN_MESSAGES - 1 }, on).blocked, ["too_short"], "a fresh target waits");
  assert.deepEqual(decide({ ...READY, auto: false, draft: true, ratio: Number.NaN }, on).blocked, ["pressure_low", "auto_off", "draft"]);
});

test("page health's rollover_recommended: the same preconditions, the estimate aside, once per episode", () => {
  const on = rolloverOptions({ rolloverAuto: true });
  const ready = { ...READY, ratio: 0.01, recommended: true, alreadyStarted: false };
  assert.deepEqual(decideRecommended(ready, on), { go: true, blocked: [] });
  assert.deepEqual(decideRecommended(ready, rolloverOptions({})).blocked, ["rollover_off"]);
  assert.deepEqual(decideRecommended({ ...ready, recommended: false }, on).blocked, ["not_recommended"]);
  assert.deepEqual(decideRecommended({ ...ready, alreadyStarted: true }, on).blocked, ["already_started"]);
  assert.deepEqual(decideRecommended({ ...ready, auto: false, generating: true, draft: true }, on).blocked, ["auto_off", "streaming", "draft"]);
  assert.deepEqual(decideRecommended({ ...ready, working: true, handoffBusy: true }, on).blocked, ["workspace_working", "handoff_in_progress"]);
  assert.deepEqual(decideRecommended({ ...ready, messages: MIN_MESSAGES - 1 }, on).blocked, ["too_short"]);
});
