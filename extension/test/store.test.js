// The worker's store (src/background/store.js) over the in-memory chrome.storage.local of
// fake-chrome.js, counting the round trips each call makes: the copy of the keys only the worker
// writes answers reads without one, every write still goes to storage, the keys other pages write
// are always read from storage, and a change made elsewhere reaches the copy.

import assert from "node:assert/strict";
import { beforeEach, test } from "node:test";

import * as store from "../src/background/store.js";
import { installChrome } from "./fake-chrome.js";

let stored;
let trips;

beforeEach(() => {
  stored = installChrome({ stored: { "ws:w1": { working: true, turn: "w3" }, options: { progressTickSec: 60 } } });
  trips = [];
  const local = globalThis.chrome.storage.local;
  for (const name of ["get", "set", "remove"]) {
    const real = local[name].bind(local);
    local[name] = (...args) => {
      trips.push(name);
      return real(...args);
    };
  }
});

test("a key the worker alone writes is read from storage once, then from the copy; writes still go to storage", async () => {
  assert.deepEqual(await store.get("ws:w1", null), { working: true, turn: "w3" });
  assert.deepEqual(await store.get("ws:w1", null), { working: true, turn: "w3" });
  assert.deepEqual(trips, ["get"]);

  await store.set("ws:w1", { working: false, turn: "w3" });
  assert.deepEqual(stored.get("ws:w1"), { working: false, turn: "w3" }, "written to storage");
  assert.deepEqual(await store.get("ws:w1", null), { working: false, turn: "w3" });
  assert.deepEqual(trips, ["get", "set"]);

  const copy = await store.get("ws:w1", null);
  copy.working = true;
  assert.equal((await store.get("ws:w1", null)).working, false, "a caller never holds the copy's own object");
});

test("an absent key is known absent: read once, and removing it again makes no round trip", async () => {
  assert.equal(await store.get("outbox:chatgpt:conv:c1", null), null);
  assert.equal(await store.get("outbox:chatgpt:conv:c1", "fallback"), "fallback");
  await store.remove("outbox:chatgpt:conv:c1");
  assert.deepEqual(trips, ["get"]);

  await store.set("outbox:chatgpt:conv:c1", { text: "progress", at: 1 });
  await store.remove("outbox:chatgpt:conv:c1");
  assert.equal(stored.has("outbox:chatgpt:conv:c1"), false);
  assert.equal(await store.get("outbox:chatgpt:conv:c1", null), null);
  assert.deepEqual(trips, ["get", "set", "remove"]);
});

test("getMany reads only the keys not in the copy, in one round trip", async () => {
  await store.get("ws:w1", null);
  const found = await store.getMany({ "ws:w1": null, "auto:chatgpt:conv:c1": false, "queue:c1": [] });
  assert.deepEqual(found, { "ws:w1": { working: true, turn: "w3" }, "auto:chatgpt:conv:c1": false, "queue:c1": [] });
  assert.deepEqual(trips, ["get", "get"]);
  await store.getMany({ "ws:w1": null, "auto:chatgpt:conv:c1": false, "queue:c1": [] });
  assert.deepEqual(trips, ["get", "get"], "all in the copy now");
});

test("keys other pages write (options, health:*, control:*) are read from storage every time", async () => {
  for (const key of ["options", "health:c1", "control:pinned"]) {
    await store.get(key, null);
    await store.get(key, null);
  }
  assert.deepEqual(trips, ["get", "get", "get", "get", "get", "get"]);
  await store.set("health:c1", { episode: null });
  await store.get("health:c1", null);
  assert.deepEqual(trips.slice(6), ["set", "get"]);
});

test("a change made elsewhere (another page, a test) reaches the copy: the next read sees it", async () => {
  assert.equal(await store.get("auto:chatgpt:conv:c1", false), false);
  stored.set("auto:chatgpt:conv:c1", true); // another page's write: chrome.storage.onChanged
  assert.equal(await store.get("auto:chatgpt:conv:c1", false), true);
  stored.delete("auto:chatgpt:conv:c1");
  assert.equal(await store.get("auto:chatgpt:conv:c1", false), false);

  await store.set("ws:w1", { working: false, turn: "w4" });
  const before = trips.length;
  stored.set("ws:w1", { working: false, turn: "w4" }); // the same value: the copy holds
  assert.deepEqual(await store.get("ws:w1", null), { working: false, turn: "w4" });
  assert.equal(trips.length, before, "an unchanged value keeps the copy");
});

test("a read that a write overtook does not put the older value into the copy", async () => {
  const local = globalThis.chrome.storage.local;
  const real = local.get;
  let release;
  local.get = async (names) => {
    const answer = await real(names); // read now, answered later
    await new Promise((resolve) => (release = resolve));
    return answer;
  };
  const reading = store.get("ws:w1", null);
  await new Promise((resolve) => setImmediate(resolve));
  await store.set("ws:w1", { working: false, turn: "w9" });
  release();
  assert.deepEqual(await reading, { working: true, turn: "w3" }, "the read answers what storage held");
  local.get = real;
  assert.deepEqual(await store.get("ws:w1", null), { working: false, turn: "w9" }, "the copy holds the write");
});

test("update is a serialised read-modify-write of one key, through the copy", async () => {
  await Promise.all([
    store.update("queue:c1", [], (queue) => [...queue, "a"]),
    store.update("queue:c1", [], (queue) => [...queue, "b"]),
  ]);
  assert.deepEqual(stored.get("queue:c1"), ["a", "b"]);
  assert.deepEqual(trips, ["get", "set", "set"]);
});
