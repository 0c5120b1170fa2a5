// A confirmed handoff whose cutover fails midway (the runtime refusing or unreachable at
// inbox.move) stays confirmed and is tried again: after CUTOVER_RETRY_MS, doubling, and at once
// when the native host says hello again (background/handoff.js). The worker's storage is an
// in-memory chrome.storage.local (fake-chrome.js); the native host answers through `call`,
// failing while told to.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { beforeEach, test } from "node:test";

import { CUTOVER_RETRY_MS, Handoff } from "../src/background/handoff.js";
import { useCatalog } from "../src/lib/i18n.js";
import { installChrome } from "./fake-chrome.js";

// The texts are the English catalog's (chrome.i18n is absent here).
useCatalog(JSON.parse(readFileSync(new URL("../_locales/en/messages.json", import.meta.url), "utf8")));

const SOURCE = "zsrc0001";
const TARGET = "ztgt0002";
const SCOPE = `zai:conv:${SOURCE}`;

let stored;
let native;
let bindings;
let notes;
let pumped;

function confirmedRecord() {
  return {
    transferId: "tr-1",
    scope: SCOPE,
    site: "zai",
    kind: "conv",
    projectId: null,
    sourceConvKey: SOURCE,
    sourceUrl: `https://chat.z.ai/c/${SOURCE}`,
    auto: true,
    phase: "confirmed",
    message: "[herdr-handoff transfer=tr-1 continuity=cont_1]\n...",
    marker: "[herdr-handoff transfer=tr-1 continuity=cont_1]",
    workspaceId: "w1",
    targetTabId: 7,
    targetConvKey: TARGET,
    continuityId: "cont_1",
    error: null,
    attempts: 1,
    startedAt: 1,
    updatedAt: 1,
  };
}

beforeEach(() => {
  stored = installChrome({ stored: { [`handoff:${SCOPE}`]: confirmedRecord() } });
  native = {
    failing: 0,
    calls: [],
    async call(path, body) {
      this.calls.push(path);
      if (this.failing > 0) {
        this.failing -= 1;
        throw Object.assign(new Error("the runtime is not reachable"), { code: "runtime_unreachable" });
      }
      return { moved: 1, body };
    },
  };
  const byScope = new Map([[SCOPE, { scope: SCOPE, workspace_id: "w1", label: "api" }]]);
  bindings = {
    get: (scope) => byScope.get(scope) ?? null,
    async set(scope, workspaceId, extra = {}) {
      if (workspaceId === null) {
        byScope.delete(scope);
      } else {
        byScope.set(scope, { scope, workspace_id: workspaceId, ...extra });
      }
    },
    byScope,
  };
  notes = [];
  pumped = [];
});

function makeHandoff() {
  const continuity = {
    note: (scope, line) => notes.push([scope, line]),
    broadcast() {},
    pump: (convKey) => pumped.push(convKey),
  };
  const tabs = { byId: new Map(), forConv: () => null };
  return new Handoff({ native, bindings, tabs, bridgeTabs: tabs, continuity, log: { warn() {} } });
}

async function settled(handoff) {
  while (handoff.running.size > 0) {
    await Promise.all([...handoff.running.values()]);
  }
}

test("a cutover failing at inbox.move stays confirmed and is tried again after the wait", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  native.failing = 1;
  const handoff = makeHandoff();
  await handoff.restore(); // runs the confirmed transfer: its cutover fails
  await settled(handoff);
  assert.equal(stored.get(`handoff:${SCOPE}`).phase, "confirmed");
  assert.deepEqual(native.calls, ["/browser/inbox.move"]);
  assert.ok(bindings.get(SCOPE), "nothing moved before inbox.move succeeded");
  assert.match(notes.at(-1)[1], /cutover not finished \(runtime_unreachable.*trying again in 5 s/);
  assert.ok(handoff.holds(SOURCE), "the source still waits");

  t.mock.timers.tick(CUTOVER_RETRY_MS - 1);
  await settled(handoff);
  assert.equal(native.calls.length, 1, "not before the wait");
  t.mock.timers.tick(1);
  await settled(handoff);
  assert.equal(stored.get(`handoff:${SCOPE}`).phase, "done");
  assert.deepEqual(native.calls, ["/browser/inbox.move", "/browser/inbox.move"]);
  assert.equal(bindings.get(SCOPE), null);
  assert.equal(bindings.get(`zai:conv:${TARGET}`).workspace_id, "w1");
  assert.equal(stored.get(`auto:zai:conv:${TARGET}`), true);
  assert.deepEqual(pumped, [TARGET]);
  assert.equal(handoff.holds(SOURCE), false);
});

test("the wait doubles while the cutover keeps failing, and a hello tries at once", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  native.failing = 3;
  const handoff = makeHandoff();
  await handoff.restore();
  await settled(handoff);
  t.mock.timers.tick(CUTOVER_RETRY_MS);
  await settled(handoff);
  assert.equal(native.calls.length, 2);
  assert.match(notes.at(-1)[1], /trying again in 10 s/);
  t.mock.timers.tick(2 * CUTOVER_RETRY_MS - 1);
  await settled(handoff);
  assert.equal(native.calls.length, 2, "the second wait is twice the first");

  // The native host reconnects before the timer: the cutover is tried now, and still fails once.
  await handoff.retryCutovers();
  await settled(handoff);
  assert.equal(native.calls.length, 3);
  assert.match(notes.at(-1)[1], /trying again in 20 s/);
  await handoff.retryCutovers();
  await settled(handoff);
  assert.equal(stored.get(`handoff:${SCOPE}`).phase, "done");
  assert.equal(native.calls.length, 4);
  t.mock.timers.tick(60_000);
  await settled(handoff);
  assert.equal(native.calls.length, 4, "no timer left behind once done");
});

test("a transfer not confirmed is not retried by a hello", async () => {
  stored.set(`handoff:${SCOPE}`, { ...confirmedRecord(), phase: "seed_uncertain" });
  const handoff = makeHandoff();
  await handoff.retryCutovers();
  await settled(handoff);
  assert.deepEqual(native.calls, []);
  assert.equal(stored.get(`handoff:${SCOPE}`).phase, "seed_uncertain");
});
