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
  const first = wakeFor(wake, "w10", 1);
  assert.equal(first.created, true);
  wake = first.wake;
  assert.equal(wakeFor(wake, "w10", 2).created, false, "pending already");
  wake = woke(wake, "w10");
  assert.deepEqual(wake, { wokenTurn: "w10", pending: null });
  assert.equal(wakeFor(wake, "w10", 3).created, false, "already woken");
  assert.equal(wakeFor(wake, "w20", 4).created, true, "the next turn wakes again");
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

test("woke keeps a newer pending wake", () => {
  const wake = { wokenTurn: null, pending: { turn: "w9", at: 1 } };
  assert.deepEqual(woke(wake, "w8"), { wokenTurn: "w8", pending: { turn: "w9", at: 1 } });
});
