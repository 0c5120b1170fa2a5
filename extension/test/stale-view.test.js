import assert from "node:assert/strict";
import { test } from "node:test";

import { NOT_ACCEPTED, SERVER_AHEAD, STALLED, SYNCED, UNKNOWN, classify, parseSnapshot, timeoutAction } from "../src/lib/stale-view.js";

const NOW = 1_800_000_000_000;
const sec = (ms) => ms / 1000;

/** A ChatGPT-shaped snapshot: root -> u1 -> (a1 ...) with current_node the last one. */
function snapshot(nodes, current = nodes.at(-1).id) {
  const mapping = { root: { id: "root", parent: null, children: [], message: null } };
  let parent = "root";
  for (const n of nodes) {
    mapping[n.id] = {
      id: n.id,
      parent,
      children: [],
      message: {
        id: n.id,
        author: { role: n.role },
        content: { content_type: "text", parts: [n.text ?? ""] },
        status: n.status ?? "finished_successfully",
        create_time: sec(n.at ?? NOW - 5_000),
        update_time: n.updated === undefined ? sec(n.at ?? NOW - 5_000) : n.updated,
      },
    };
    mapping[parent].children?.push(n.id);
    parent = n.id;
  }
  return { current_node: current, mapping };
}

const user = { id: "u1", role: "user", text: "Run the tests." };
const reply = (text, extra = {}) => ({ id: "a1", role: "assistant", text, ...extra });
const opts = { nowMs: NOW, stalledAfterMs: 60_000 };

test("server ahead: a message the page does not show yet (page shows none)", () => {
  const result = classify(snapshot([user, reply("Done: 12 passed.")]), { assistantId: null, assistantLength: 0, generating: true }, opts);
  assert.equal(result.kind, SERVER_AHEAD);
  assert.equal(result.evidence.server.messageId, "a1");
});

test("server ahead: same message, server text clearly longer", () => {
  const long = "x".repeat(400);
  const result = classify(snapshot([user, reply(long, { status: "in_progress", updated: sec(NOW - 1_000) })]), { assistantId: "a1", assistantLength: 100, generating: true }, opts);
  assert.equal(result.kind, SERVER_AHEAD);
  assert.match(result.reason, /longer/);
});

test("a few characters more (markdown vs rendered text) are not ahead", () => {
  const result = classify(snapshot([user, reply("y".repeat(120))]), { assistantId: "a1", assistantLength: 110, generating: false }, opts);
  assert.equal(result.kind, SYNCED);
});

test("server ahead: finished on the server, the page still shows the stop button", () => {
  const result = classify(snapshot([user, reply("abc")]), { assistantId: "a1", assistantLength: 3, generating: true }, opts);
  assert.equal(result.kind, SERVER_AHEAD);
});

test("server ahead: a newer assistant message than the page's last one", () => {
  const nodes = [user, reply("first"), { id: "u2", role: "user", text: "more" }, { id: "a2", role: "assistant", text: "second" }];
  const result = classify(snapshot(nodes), { assistantId: "a1", assistantLength: 5, generating: true }, opts);
  assert.equal(result.kind, SERVER_AHEAD);
  assert.equal(result.evidence.server.messageId, "a2");
});

test("not accepted: current_node is the user's message and nothing is generating", () => {
  const result = classify(snapshot([user]), { assistantId: null, assistantLength: 0, generating: false }, opts);
  assert.equal(result.kind, NOT_ACCEPTED);
});

test("the user's node while the page generates: synced while young, stalled when old", () => {
  const dom = { assistantId: null, assistantLength: 0, generating: true };
  assert.equal(classify(snapshot([{ ...user, at: NOW - 1_000 }]), dom, opts).kind, SYNCED);
  assert.equal(classify(snapshot([{ ...user, at: NOW - 120_000 }]), dom, opts).kind, STALLED);
});

test("stalled: in progress on the server with no update for stalledAfter; recent -> synced", () => {
  const dom = { assistantId: "a1", assistantLength: 10, generating: true };
  const old = snapshot([user, reply("z".repeat(10), { status: "in_progress", updated: sec(NOW - 61_000) })]);
  const fresh = snapshot([user, reply("z".repeat(10), { status: "in_progress", updated: sec(NOW - 5_000) })]);
  assert.equal(classify(old, dom, opts).kind, STALLED);
  assert.equal(classify(fresh, dom, opts).kind, SYNCED);
});

test("synced: same message, same text, finished, nothing generating", () => {
  const result = classify(snapshot([user, reply("Done.")]), { assistantId: "a1", assistantLength: 5, generating: false }, opts);
  assert.equal(result.kind, SYNCED);
});

test("tool nodes after the assistant message: the assistant message is compared", () => {
  const nodes = [user, reply("calling", { status: "finished_successfully" }), { id: "t1", role: "tool", text: "{}", status: "in_progress", updated: sec(NOW - 1_000) }];
  const parsed = parseSnapshot(snapshot(nodes));
  assert.equal(parsed.lastAssistant.id, "a1");
  const result = classify(snapshot(nodes), { assistantId: "a1", assistantLength: 7, generating: true }, opts);
  assert.equal(result.kind, SYNCED); // the tool call is in progress and recent
});

test("unknown: not a snapshot, no mapping, unreadable current node, missing time, foreign id", () => {
  const dom = { assistantId: "a1", assistantLength: 3, generating: true };
  for (const raw of [null, "<html>", { detail: "Unauthorized" }, { current_node: "x", mapping: {} }, { current_node: "a1" }]) {
    assert.equal(classify(raw, dom, opts).kind, UNKNOWN, JSON.stringify(raw));
  }
  const noStatus = snapshot([user, reply("abc")]);
  delete noStatus.mapping.a1.message.status;
  assert.equal(classify(noStatus, dom, opts).kind, UNKNOWN);
  const noTime = snapshot([user, reply("abc", { status: "in_progress", updated: null })]);
  noTime.mapping.a1.message.create_time = null;
  assert.equal(classify(noTime, dom, opts).kind, UNKNOWN);
  assert.equal(classify(snapshot([user, reply("abc")]), { ...dom, assistantId: "a-elsewhere" }, opts).kind, UNKNOWN);
});

test("timed-out send: assistant node -> reload (never Retry); user node -> Retry; unreadable -> view reload", () => {
  assert.equal(timeoutAction(snapshot([user, reply("ok")])).action, "reload");
  assert.equal(timeoutAction(snapshot([user, { id: "t1", role: "tool", text: "" }])).action, "reload");
  assert.equal(timeoutAction(snapshot([user])).action, "retry");
  const unknown = timeoutAction({ detail: "x" });
  assert.equal(unknown.action, "reload");
  assert.equal(unknown.kind, UNKNOWN);
});
