import assert from "node:assert/strict";
import { test } from "node:test";

import { SUMMARY_CHARS, addOutput, initialProgress, normalizeOptions, startTurn, summarize, tick } from "../src/lib/progress.js";

const OPTIONS = { progressTickSec: 60, progressFallbackSec: 600 };

test("new non-empty output is sent once; the same summary again is not", () => {
  let state = startTurn(initialProgress(), 1_000);
  state = addOutput(state, "compiling module A\n");
  let result = tick(state, 61_000, OPTIONS);
  assert.deepEqual(result.send, { kind: "progress", summary: "compiling module A" });
  state = addOutput(result.state, "compiling module A\n");
  result = tick(state, 121_000, OPTIONS);
  assert.equal(result.send, null, "an identical summary is not resent");
  state = addOutput(result.state, "compiling module B\n");
  result = tick(state, 181_000, OPTIONS);
  assert.deepEqual(result.send, { kind: "progress", summary: "compiling module B" });
});

test("a tick with no new output sends nothing until the fallback is due, then once", () => {
  let state = startTurn(initialProgress(), 0);
  let result = tick(state, 60_000, OPTIONS);
  assert.equal(result.send, null);
  result = tick(result.state, 599_000, OPTIONS);
  assert.equal(result.send, null);
  result = tick(result.state, 600_000, OPTIONS);
  assert.deepEqual(result.send, { kind: "fallback", quietSec: 600 });
  result = tick(result.state, 660_000, OPTIONS);
  assert.equal(result.send, null, "the fallback clock restarts after a send");
  state = result.state;
  assert.equal(tick(state, 1_200_000, OPTIONS).send.kind, "fallback");
});

test("whitespace-only and terminal noise are not output", () => {
  let state = startTurn(initialProgress(), 0);
  state = addOutput(state, "\n   \n\u001b[2K\r\n");
  assert.equal(tick(state, 1_000, OPTIONS).send, null);
});

test("the persisted state survives a restart: a fresh worker with it does not resend", () => {
  let state = addOutput(startTurn(initialProgress(), 0), "step 1 done\n");
  state = tick(state, 60_000, OPTIONS).state;
  const restored = JSON.parse(JSON.stringify(state));
  assert.equal(tick(addOutput(restored, "step 1 done"), 120_000, OPTIONS).send, null);
});

test("a summary keeps the newest lines within the bound", () => {
  const lines = Array.from({ length: 200 }, (_, index) => `line ${index}`).join("\n");
  const summary = summarize(lines);
  assert.ok(summary.length <= SUMMARY_CHARS);
  assert.ok(summary.endsWith("line 199"));
  assert.equal(summarize("z".repeat(5_000)).length, SUMMARY_CHARS);
});

test("options are whole seconds with sane defaults", () => {
  assert.deepEqual(normalizeOptions({}), { progressTickSec: 60, progressFallbackSec: 600 });
  assert.deepEqual(normalizeOptions({ progressTickSec: "2", progressFallbackSec: 0 }), { progressTickSec: 2, progressFallbackSec: 600 });
  assert.deepEqual(normalizeOptions({ progressTickSec: "x", progressFallbackSec: 30.4 }), { progressTickSec: 60, progressFallbackSec: 30 });
});

test("each tick records how many outputs it has looked at", () => {
  let state = startTurn(initialProgress(), 0);
  state = addOutput(addOutput(state, "a\n"), "a\n");
  assert.equal(state.outputs, 2);
  assert.equal(state.checked, 0);
  state = tick(state, 1_000, OPTIONS).state;
  assert.equal(state.checked, 2);
});
