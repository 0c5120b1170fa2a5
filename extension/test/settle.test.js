import assert from "node:assert/strict";
import { test } from "node:test";

import { initialWake, initialWorkspace, onSettled, onWorking, reconcile, wakeFor, woke } from "../src/lib/settle.js";

const settled = (seq, workspaceWorking = false) => ({ seq, workspace_working: workspaceWorking });

test("working then settled wakes once; a second settle of the same turn does not", () => {
  let workspace = onWorking(initialWorkspace(), 10);
  let result = onSettled(workspace, settled(12));
  assert.equal(result.settledTurn, "w10");
  workspace = result.workspace;
  result = onSettled(workspace, settled(13));
  assert.equal(result.settledTurn, null);

  let wake = initialWake();
  const first = wakeFor(wake, "w10", 1, 12);
  assert.equal(first.created, true);
  wake = first.wake;
  assert.equal(wakeFor(wake, "w10", 2, 12).created, false, "pending already");
  wake = woke(wake, wake.pending);
  assert.deepEqual(wake, { wokenTurn: "w10", wokenSeq: 12, pending: null });
  assert.equal(wakeFor(wake, "w10", 3, 13).created, false, "already woken");
  assert.equal(wakeFor(wake, "w20", 4, 22).created, true, "the next turn wakes again");
});

test("a settle older than the last wake sent is covered by it (a replay after an inbox wake)", () => {
  let wake = wakeFor(initialWake(), "inbox1", 1, 40).wake;
  wake = woke(wake, wake.pending);
  assert.equal(wakeFor(wake, "w35", 2, 38).created, false);
  assert.equal(wakeFor(wake, "w41", 3, 41).created, true);
});

test("a settle replayed while the inbox wake it belongs to is being sent wakes nobody", () => {
  let wake = wakeFor(initialWake(), "inbox1", 1, 9).wake;
  const sent = wake.pending;
  wake = wakeFor(wake, "w5", 2, 9).wake; // the replay arrives during the send
  assert.deepEqual(wake.pending, sent);
  assert.deepEqual(woke(wake, sent), { wokenTurn: "inbox1", wokenSeq: 9, pending: null });
});

test("a second turn ending while a wake is pending merges into it: still one wake", () => {
  let wake = wakeFor(initialWake(), "w1", 1, 5).wake;
  const merged = wakeFor(wake, "w7", 2, 9);
  assert.equal(merged.created, false);
  wake = merged.wake;
  assert.deepEqual(wake.pending, { turn: "w7", at: 1, seq: 9 });
  const sent = wake.pending;
  wake = wakeFor(wake, "w12", 3, 14).wake; // arrives while the wake is being typed
  wake = woke(wake, sent);
  assert.deepEqual(wake, { wokenTurn: "w7", wokenSeq: 9, pending: { turn: "w12", at: 1, seq: 14 } });
});

test("a pane settling while another pane works is not the end of the turn", () => {
  let workspace = onWorking(initialWorkspace(), 1);
  const partial = onSettled(workspace, settled(2, true));
  assert.equal(partial.settledTurn, null);
  workspace = onWorking(partial.workspace, 3);
  assert.equal(workspace.turn, "w1", "still the same turn");
  assert.equal(onSettled(workspace, settled(4)).settledTurn, "w1");
});

test("a settle with no working seen wakes nobody", () => {
  assert.equal(onSettled(initialWorkspace(), settled(5)).settledTurn, null);
});

test("replayed events give the same result as live ones (the state is plain JSON)", () => {
  const live = onSettled(onWorking(initialWorkspace(), 7), settled(8));
  const stored = JSON.parse(JSON.stringify(onWorking(initialWorkspace(), 7)));
  assert.deepEqual(onSettled(stored, settled(8)), live);
});

test("reconcile with live state: a workspace that stopped while the log had a gap ends its turn once", () => {
  const working = onWorking(initialWorkspace(), 3);
  const ended = reconcile(working, false, 50);
  assert.equal(ended.settledTurn, "w3");
  assert.equal(reconcile(ended.workspace, false, 51).settledTurn, null);
  const started = reconcile(initialWorkspace(), true, 52);
  assert.deepEqual(started, { workspace: { working: true, turn: "s52" }, settledTurn: null });
});

