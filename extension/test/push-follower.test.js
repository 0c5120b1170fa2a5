import assert from "node:assert/strict";
import { afterEach, beforeEach, mock, test } from "node:test";

import { NativeClient } from "../src/background/native-port.js";
import { changeEvent, ObservedStorage } from "./fake-chrome.js";
import { FakePort } from "./fake-port.js";
import { PushFollower } from "../src/background/push-follower.js";

// chrome.storage.local as push-follower.js (through store.js) uses it: get of a key or a list, set, every
// change reported to onChanged (store.js keeps a copy of what the worker alone writes).
const listeners = new Set();
const storage = new ObservedStorage([], listeners);
globalThis.chrome = {
  storage: {
    onChanged: changeEvent(listeners),
    local: {
      get: async (names) =>
        Object.fromEntries([names].flat().filter((key) => storage.has(key)).map((key) => [key, storage.get(key)])),
      set: async (values) => {
        for (const [key, value] of Object.entries(values)) {
          storage.set(key, value);
        }
      },
      remove: async (key) => storage.delete(key),
    },
  },
};


const quiet = { warn() {}, error() {}, log() {} };
let ports;
let native;
let follower;

/** Let the follower's awaits (storage reads) run. */
async function settle() {
  for (let n = 0; n < 20; n += 1) {
    await Promise.resolve();
  }
}

function openStreams() {
  return ports.flatMap((port) => port.posted.filter((frame) => frame.stream && !port.cancelled?.has(frame.id)));
}

beforeEach(async () => {
  storage.clear();
  storage.set("push:lastSeq", 7);
  mock.timers.enable({ apis: ["setTimeout"] });
  ports = [];
  native = new NativeClient({
    connectNative: () => {
      const port = new FakePort();
      ports.push(port);
      return port;
    },
    log: quiet,
  });
  follower = new PushFollower(native, async () => {}, { log: quiet });
  native.onConnection((up) => up && follower.reconnected());
  native.connect();
  await follower.start();
  await settle();
});

afterEach(() => mock.timers.reset());

test("one stream after the native host goes away and comes back, whichever timer fires first", async () => {
  assert.equal(native.streams.size, 1);
  for (let restart = 0; restart < 4; restart += 1) {
    ports.at(-1).drop(); // the host exited: its stream ended with it
    await settle();
    assert.equal(native.streams.size, 0);
    // Both the port's reconnect and the follower's retry are due; run every timer there is.
    for (let step = 0; step < 10; step += 1) {
      mock.timers.tick(1_000);
      await settle();
    }
    assert.equal(native.streams.size, 1, `one stream open after restart ${restart + 1}`);
    const streamsOnPort = ports.at(-1).posted.filter((frame) => frame.stream);
    assert.equal(streamsOnPort.length, 1, "the new host was asked for one stream");
    assert.deepEqual(streamsOnPort[0].query, { after: "7" });
  }
  assert.equal(follower.opened, 5);
  assert.ok(openStreams().length >= 1);
});

test("a stream ended by the runtime is reopened once after the backoff", async () => {
  const [first] = ports[0].posted;
  ports[0].deliver({ id: first.id, end: true, error: { code: "runtime_unavailable", message: "gone" } });
  await settle();
  follower.reconnected(); // the port did not go away: nothing to do yet
  await settle();
  mock.timers.tick(1_000);
  await settle();
  assert.equal(ports[0].posted.filter((frame) => frame.stream).length, 2);
  assert.equal(native.streams.size, 1);
});
