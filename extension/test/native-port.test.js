import assert from "node:assert/strict";
import { afterEach, beforeEach, mock, test } from "node:test";

import { NativeClient } from "../src/background/native-port.js";
import { FakePort } from "./fake-port.js";


let ports;
let client;
const quiet = { warn() {}, error() {} };

beforeEach(() => {
  mock.timers.enable({ apis: ["setTimeout"] });
  ports = [];
  client = new NativeClient({
    connectNative: (name) => {
      assert.equal(name, "com.herdr_mcp.host");
      const port = new FakePort();
      ports.push(port);
      return port;
    },
    log: quiet,
  });
  client.connect();
});

afterEach(() => mock.timers.reset());

test("a request gets its own reply by id; a GET carries no body", async () => {
  const first = client.call("/browser/binding.get", { scope: "chatgpt:conv:a" });
  const second = client.request("GET", "/push/state");
  const [postFirst, postSecond] = ports[0].posted;
  assert.deepEqual(postFirst.body, { scope: "chatgpt:conv:a" });
  assert.equal("body" in postSecond, false);
  ports[0].deliver({ id: postSecond.id, status: 200, body: { seq: 3, workspaces: [] } });
  ports[0].deliver({ id: postFirst.id, status: 200, body: { binding: null } });
  assert.deepEqual(await first, { binding: null });
  assert.deepEqual(await second, { seq: 3, workspaces: [] });
});

test("runtime errors and host refusals reject with their code", async () => {
  const refused = client.call("/browser/nope", {});
  const failed = client.call("/browser/binding.set", {});
  const [a, b] = ports[0].posted;
  ports[0].deliver({ id: a.id, error: { code: "path_not_allowed", message: "no" } });
  ports[0].deliver({ id: b.id, status: 404, body: { error: { code: "workspace_not_found", message: "gone" } } });
  await assert.rejects(refused, { code: "path_not_allowed" });
  await assert.rejects(failed, { code: "workspace_not_found", status: 404 });
});

test("a chunked reply is reassembled", async () => {
  const reply = client.call("/browser/binding.list", {});
  const { id } = ports[0].posted[0];
  const text = JSON.stringify({ id, status: 200, body: { bindings: ["x".repeat(100)] } });
  const parts = [text.slice(0, 40), text.slice(40, 90), text.slice(90)];
  parts.forEach((data, index) => ports[0].deliver({ id, chunk: { index, count: 3, data } }));
  assert.deepEqual(await reply, { bindings: ["x".repeat(100)] });
});

test("a stream delivers events until its end; cancel sends a cancel frame", () => {
  const events = [];
  let ended = "open";
  const cancel = client.stream("/push/events", { after: "41" }, (type, data) => events.push([type, data]), (error) => {
    ended = error;
  });
  const open = ports[0].posted[0];
  assert.deepEqual({ ...open, id: undefined }, { id: undefined, method: "GET", path: "/push/events", query: { after: "41" }, stream: true });
  ports[0].deliver({ id: open.id, event: "hello", data: { protocol: 1, seq: 41 } });
  ports[0].deliver({ id: open.id, end: true });
  assert.deepEqual(events, [["hello", { protocol: 1, seq: 41 }]]);
  assert.equal(ended, null);
  const again = client.stream("/push/events", {}, () => {}, () => {});
  again();
  assert.deepEqual(ports[0].posted.at(-1), { id: ports[0].posted.at(-2).id, cancel: true });
  assert.equal(typeof cancel, "function");
});

test("a lost host rejects what waits, ends streams, and reconnects with growing delays", async () => {
  const pending = client.call("/browser/binding.list", {});
  let streamError = null;
  client.stream("/push/events", {}, () => {}, (error) => {
    streamError = error;
  });
  ports[0].drop();
  await assert.rejects(pending, { code: "runtime_unavailable" });
  assert.equal(streamError.code, "runtime_unavailable");
  assert.equal(client.connected, false);
  mock.timers.tick(999);
  assert.equal(ports.length, 1, "not before the first delay");
  mock.timers.tick(1);
  assert.equal(ports.length, 2, "reconnected after 1 s");
  ports[1].drop();
  mock.timers.tick(1_999);
  assert.equal(ports.length, 2);
  mock.timers.tick(1);
  assert.equal(ports.length, 3, "then after 2 s");
});

test("a burst beyond the host's cap waits in order; each answer lets the next one go", async () => {
  const { MAX_IN_FLIGHT } = await import("../src/background/native-port.js");
  const answers = Array.from({ length: 200 }, (_, n) => client.call("/browser/binding.get", { scope: `chatgpt:conv:c${n}` }));
  const port = ports[0];
  assert.equal(port.posted.length, MAX_IN_FLIGHT, "only the cap is sent at first");
  let answered = 0;
  while (answered < 200) {
    const frame = port.posted[answered];
    assert.ok(frame, `request ${answered} was sent`);
    port.deliver({ id: frame.id, status: 200, body: { n: frame.body.scope } });
    answered += 1;
    assert.ok(port.posted.length - answered <= MAX_IN_FLIGHT, "never more than the cap in flight");
  }
  const bodies = await Promise.all(answers);
  assert.deepEqual(
    bodies.map((body) => body.n),
    Array.from({ length: 200 }, (_, n) => `chatgpt:conv:c${n}`),
  );
  assert.deepEqual(
    port.posted.map((frame) => frame.body.scope),
    Array.from({ length: 200 }, (_, n) => `chatgpt:conv:c${n}`),
    "sent in the order asked",
  );
});

test("the host's refusal for its cap puts the request back; it is sent again and answered", async () => {
  const answer = client.call("/browser/binding.list", {});
  const port = ports[0];
  const [first] = port.posted;
  port.deliver({ id: first.id, error: { code: "invalid_request", message: "64 requests are in flight" } });
  assert.equal(port.posted.length, 1, "not sent again at once");
  mock.timers.tick(200);
  assert.equal(port.posted.length, 2, "sent again after the short wait");
  assert.equal(port.posted[1].id, first.id);
  port.deliver({ id: first.id, status: 200, body: { bindings: [] } });
  assert.deepEqual(await answer, { bindings: [] });
});

test("other invalid_request refusals are errors, not retried", async () => {
  const answer = client.call("/browser/binding.list", {});
  const port = ports[0];
  port.deliver({ id: port.posted[0].id, error: { code: "invalid_request", message: "request r1 is still in flight" } });
  await assert.rejects(answer, (error) => error.code === "invalid_request");
  mock.timers.tick(1_000);
  assert.equal(port.posted.length, 1);
});
