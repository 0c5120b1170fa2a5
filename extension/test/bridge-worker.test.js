// The bridge's worker side (src/background/bridge.js) with its real protocol, schema and cleaning
// (lib/bridge-*.js) and its real storage code (background/store.js) over an in-memory
// chrome.storage.local (fake-chrome.js). What stands in is the far end only: the native host
// forwarding POST /mcp to the runtime, answering stateless MCP 2026-07-28 JSON-RPC as
// docs/browser-protocol.md section 4 and README "Bridge" describe it (tools/list in pages with
// nextCursor, tools/call with `_meta["herdr-mcp/scope"]`). Every request it gets is recorded, with
// what storage held at that moment.

import assert from "node:assert/strict";
import { beforeEach, test } from "node:test";

import { Bridge, BridgeError, MCP_PROTOCOL } from "../src/background/bridge.js";
import { MARKER, MAX_CALLS_PER_REPLY, RESULT_HEADER } from "../src/lib/bridge-protocol.js";
import { installChrome } from "./fake-chrome.js";
import { FakePort } from "./fake-port.js";
import { READ } from "./sample-tools.js";

const SCOPE = "zai:conv:c0ffee01";
const KEY = "0123456789abcdef0123456789abcdef";
const LIST = {
  name: "herdr_fs_list",
  description: "List a directory.",
  inputSchema: { type: "object", properties: { path: { type: "string" } } },
  annotations: { readOnlyHint: true },
};
const PROMPT = {
  name: "herdr_prompt",
  description: "Prompt an agent.",
  inputSchema: {
    type: "object",
    properties: { pane_id: { type: "string" }, text: { type: "string" }, idempotency_key: { type: "string" } },
    required: ["pane_id", "text"],
  },
  annotations: { readOnlyHint: false },
};

let stored;
let runtime;

/** The runtime's /mcp behind the native host; `answer(name, args)` decides a tools/call. */
class FakeMcp {
  constructor(pages) {
    this.pages = pages;
    this.requests = [];
    this.answer = (name, args) => ({ content: [{ type: "text", text: `${name} ran with ${JSON.stringify(args)}` }] });
    this.gate = null;
  }

  async request(method, path, body, { headers, timeoutMs }) {
    this.requests.push({ method, path, body, headers, timeoutMs, dispatched: stored.get(`bridge:dispatched:${SCOPE}`) ?? [] });
    assert.equal(body.jsonrpc, "2.0");
    if (body.method === "tools/list") {
      const index = body.params.cursor ? Number(body.params.cursor) : 0;
      const next = index + 1 < this.pages.length ? String(index + 1) : undefined;
      return { jsonrpc: "2.0", id: body.id, result: { tools: this.pages[index], ...(next ? { nextCursor: next } : {}) } };
    }
    if (body.method === "tools/call") {
      await this.gate;
      try {
        return { jsonrpc: "2.0", id: body.id, result: await this.answer(body.params.name, body.params.arguments) };
      } catch (error) {
        if (error.rpc) {
          return { jsonrpc: "2.0", id: body.id, error: error.rpc };
        }
        throw error;
      }
    }
    return { jsonrpc: "2.0", id: body.id, error: { code: -32601, message: `no method ${body.method}` } };
  }

  calls() {
    return this.requests.filter((request) => request.body.method === "tools/call");
  }
}

/** Waits for `condition` (turns of the event loop, a generous deadline). */
async function until(condition) {
  const deadline = Date.now() + 60_000;
  while (!condition()) {
    assert.ok(Date.now() < deadline, "timed out waiting");
    await new Promise((resolve) => setImmediate(resolve));
  }
}

function reply(...calls) {
  return ["```json", ...calls.map((call) => JSON.stringify(call)), "```"].join("\n");
}

function runRequest(text, extra = {}) {
  return { type: "run", scope: SCOPE, key: KEY, text, ...extra };
}

beforeEach(() => {
  stored = installChrome({ version: "9.8.7" });
  runtime = new FakeMcp([[READ, LIST], [PROMPT]]);
});

test("the protocol prompt is built from every page of the live tools/list, as stateless MCP", async () => {
  const bridge = new Bridge(runtime);
  const { text } = await bridge.received({ type: "prompt" });
  assert.ok(text.startsWith(MARKER));
  for (const name of ["herdr_fs_read", "herdr_fs_list", "herdr_prompt"]) {
    assert.match(text, new RegExp(`- ${name}:`));
  }
  assert.deepEqual(runtime.requests.map((request) => request.body.params.cursor ?? null), [null, "1"]);
  const first = runtime.requests[0];
  assert.equal(first.method, "POST");
  assert.equal(first.path, "/mcp");
  assert.deepEqual(first.headers, { "mcp-protocol-version": MCP_PROTOCOL, "mcp-method": "tools/list" });
  assert.equal(first.body.params._meta["io.modelcontextprotocol/protocolVersion"], MCP_PROTOCOL);
  assert.deepEqual(first.body.params._meta["io.modelcontextprotocol/clientInfo"], { name: "herdr-mcp-extension-bridge", version: "9.8.7" });
  assert.ok(runtime.requests[1].body.id > first.body.id, "each JSON-RPC request has its own id");

  // Within the cache's lifetime a run uses the list it has; the prompt always asks again.
  await bridge.run(runRequest(reply({ tool: "herdr_fs_read", args: { path: "a" } })));
  assert.equal(runtime.requests.filter((request) => request.body.method === "tools/list").length, 2);
  await bridge.received({ type: "prompt" });
  assert.equal(runtime.requests.filter((request) => request.body.method === "tools/list").length, 4);
});

test("a reply's calls run with the scope in _meta; its key is recorded before the first call, its result until delivered", async () => {
  const bridge = new Bridge(runtime);
  const text = reply({ tool: "herdr_fs_read", args: { path: "README.md" } });
  const result = await bridge.run(runRequest(text));
  assert.equal(result.status, "ran");
  assert.equal(result.reason, "in order");
  assert.ok(result.text.startsWith(RESULT_HEADER));
  assert.match(result.text, /\[1\] herdr_fs_read ok\nherdr_fs_read ran with \{"path":"README.md"\}/);

  const [call] = runtime.calls();
  assert.deepEqual(call.dispatched, [KEY], "the reply was marked dispatched before its call was sent");
  assert.equal(call.headers["mcp-name"], "herdr_fs_read");
  assert.equal(call.timeoutMs, 310_000);
  assert.deepEqual(call.body.params.arguments, { path: "README.md" });
  assert.equal(call.body.params._meta["herdr-mcp/scope"], SCOPE);
  assert.equal(stored.get(`bridge:result:${SCOPE}:${KEY}`), result.text);

  // Asked again (a reload before the page sent it): the kept text, nothing runs again.
  const again = await bridge.run(runRequest(text));
  assert.deepEqual([again.status, again.text], ["stored", result.text]);
  assert.equal(runtime.calls().length, 1);

  // The page says it sent the result: the text is dropped, the reply stays dispatched.
  assert.deepEqual(await bridge.received({ type: "delivered", scope: SCOPE, key: KEY }), {});
  assert.equal(stored.has(`bridge:result:${SCOPE}:${KEY}`), false);
  const third = await bridge.run(runRequest(text));
  assert.deepEqual([third.status, third.reason], ["skipped", "already dispatched"]);
  assert.equal(runtime.calls().length, 1);
});

test("a page reloaded during a long call waits for it and gets its result; the call runs once", async () => {
  let release;
  runtime.gate = new Promise((resolve) => (release = resolve));
  const bridge = new Bridge(runtime);
  const text = reply({ tool: "herdr_prompt", args: { pane_id: "w1:p1", text: "go" } });
  const first = bridge.run(runRequest(text));
  await until(() => runtime.calls().length === 1);
  const second = bridge.run(runRequest(text, { recovering: true }));
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(runtime.calls().length, 1, "the reloaded page's request sent nothing");
  release();
  const [ran, waited] = await Promise.all([first, second]);
  assert.equal(ran.status, "ran");
  assert.equal(waited.status, "stored");
  assert.equal(waited.text, ran.text);
  assert.equal(runtime.calls().length, 1);
});

test("after a reload without a kept result, read-only calls run again and a mutation never does", async () => {
  const bridge = new Bridge(runtime);
  const context = [{ role: "user", text: `${MARKER}\n(the protocol prompt)` }];
  const read = reply({ tool: "herdr_fs_read", args: { path: "a" } });
  const write = reply({ tool: "herdr_prompt", args: { pane_id: "w1:p1", text: "go" } });
  for (const text of [read, write]) {
    await bridge.run(runRequest(text));
    await bridge.received({ type: "delivered", scope: SCOPE, key: KEY });
    const again = await bridge.run(runRequest(text, { recovering: true, messages: [...context, { role: "assistant", text }] }));
    if (text === read) {
      assert.deepEqual([again.status], ["ran"]);
    } else {
      assert.deepEqual([again.status, again.reason], ["skipped", "dispatched before and not read-only: a mutation is never re-run"]);
    }
    await bridge.received({ type: "delivered", scope: SCOPE, key: KEY });
    stored.delete(`bridge:dispatched:${SCOPE}`);
  }
  assert.deepEqual(runtime.calls().map((call) => call.body.params.name), ["herdr_fs_read", "herdr_fs_read", "herdr_prompt"]);

  // Recovering a reply whose conversation never had the protocol prompt: nothing runs.
  const lost = await bridge.run(runRequest(write, { recovering: true, messages: [{ role: "assistant", text: write }] }));
  assert.deepEqual([lost.status, lost.reason], ["skipped", "no protocol context in this conversation"]);
  assert.equal(runtime.calls().length, 3);
});

test("read-only calls run in parallel, a mutation among them makes them run in order; a mutation gets a stable idempotency key", async () => {
  const bridge = new Bridge(runtime);
  const reads = await bridge.run(runRequest(reply({ tool: "herdr_fs_read", args: { path: "a" } }, { tool: "herdr_fs_list", args: {} })));
  assert.equal(reads.reason, "in parallel");

  await bridge.received({ type: "delivered", scope: SCOPE, key: KEY });
  stored.delete(`bridge:dispatched:${SCOPE}`);
  const mixed = await bridge.run(
    runRequest(reply({ tool: "herdr_fs_read", args: { path: "a" } }, { tool: "herdr_prompt", args: { pane_id: "w1:p1", text: "go" } })),
  );
  assert.equal(mixed.reason, "in order");
  const prompt = runtime.calls().at(-1).body.params.arguments;
  assert.equal(prompt.idempotency_key, `bridge-${KEY}-1`, "the same reply and call always carry the same key");

  await bridge.received({ type: "delivered", scope: SCOPE, key: KEY });
  stored.delete(`bridge:dispatched:${SCOPE}`);
  await bridge.run(runRequest(reply({ tool: "herdr_prompt", args: { pane_id: "w1:p1", text: "go", idempotency_key: "mine-1" } })));
  assert.equal(runtime.calls().at(-1).body.params.arguments.idempotency_key, "mine-1", "the model's own key is kept");
});

test("calls that cannot run are answered in the result, and only valid ones are sent", async () => {
  const bridge = new Bridge(runtime);
  const calls = [
    { tool: "herdr_fs_read", args: { path: "" } },
    { tool: "herdr_nope", args: {} },
    ...Array.from({ length: MAX_CALLS_PER_REPLY }, (_, index) => ({ tool: "herdr_fs_list", args: { path: `d${index}` } })),
  ];
  const text = `${reply(...calls)}\n{"tool": "herdr_fs_read", "args": {"path": "outside"}}`;
  const result = await bridge.run(runRequest(text));
  assert.equal(result.status, "ran");
  assert.match(result.text, /\[1\] herdr_fs_read error\ninvalid_arguments: /);
  assert.match(result.text, /\[2\] herdr_nope error\nunknown_tool: no tool named herdr_nope/);
  assert.match(result.text, new RegExp(`herdr_fs_list error\\nnot run: at most ${MAX_CALLS_PER_REPLY} calls per reply`));
  assert.match(result.text, /\(call\) error\ninvalid_call: .*outside a fenced json code block/);
  // The first eight were checked: two refused before sending, six sent (d0..d5); d6 and d7 not run.
  assert.deepEqual(runtime.calls().map((call) => call.body.params.arguments.path), ["d0", "d1", "d2", "d3", "d4", "d5"]);

  const none = await bridge.run({ type: "run", scope: SCOPE, key: "f".repeat(32), text: "Just prose, no calls." });
  assert.deepEqual([none.status, none.reason], ["skipped", "no calls"]);
});

test("a refused or lost call is answered as an error that says so; the reply is still recorded", async () => {
  const bridge = new Bridge(runtime);
  runtime.answer = (name) => {
    if (name === "herdr_fs_read") {
      throw Object.assign(new Error("refused"), { rpc: { code: -32602, message: "bad params" } });
    }
    throw Object.assign(new Error("the native host did not answer in time"), { code: "timeout" });
  };
  const result = await bridge.run(runRequest(reply({ tool: "herdr_fs_read", args: { path: "a" } }, { tool: "herdr_prompt", args: { pane_id: "p", text: "x" } })));
  assert.match(result.text, /\[1\] herdr_fs_read error\nmcp_error: tools\/call: bad params/);
  assert.match(result.text, /\[2\] herdr_prompt error\ntimeout: the native host did not answer in time/);
  assert.deepEqual(stored.get(`bridge:dispatched:${SCOPE}`), [KEY]);

  runtime.answer = () => ({ isError: true, content: [{ type: "text", text: "path_outside_root: no" }] });
  await bridge.received({ type: "delivered", scope: SCOPE, key: KEY });
  stored.delete(`bridge:dispatched:${SCOPE}`);
  const tool = await bridge.run(runRequest(reply({ tool: "herdr_fs_read", args: { path: "/etc" } })));
  assert.match(tool.text, /\[1\] herdr_fs_read error\npath_outside_root: no/);
});

test("bad requests are refused with invalid_request before anything is sent", async () => {
  const bridge = new Bridge(runtime);
  const refused = async (message, pattern) => {
    await assert.rejects(bridge.received(message), (error) => error instanceof BridgeError && error.code === "invalid_request" && pattern.test(error.message));
  };
  await refused(runRequest("x", { scope: "chatgpt:conv:abc" }), /zai:conv:<id> or deepseek:conv:<id>/);
  await refused(runRequest("x", { scope: "zai:conv:bad id" }), /zai:conv/);
  await refused(runRequest("x", { key: "ABC" }), /32 hex digits/);
  await refused({ type: "delivered", scope: "zai:project:x", key: KEY }, /zai:conv/);
  await refused({ type: "forget" }, /unknown bridge request forget/);
  await refused(null, /unknown bridge request undefined/);
  assert.deepEqual(runtime.requests, []);
});

test("over its port the bridge answers each request by id, ok or with the error's code", async () => {
  const bridge = new Bridge(runtime);
  const port = new FakePort();
  bridge.attach(port);
  port.deliver({ id: 1, type: "prompt" });
  port.deliver({ id: 2, type: "run", scope: "nope", key: KEY, text: "" });
  port.deliver({ id: 3, ...runRequest(reply({ tool: "herdr_fs_read", args: { path: "a" } })) });
  await until(() => port.posted.length === 3);
  const byId = new Map(port.posted.map((answer) => [answer.id, answer]));
  assert.equal(byId.get(1).ok, true);
  assert.ok(byId.get(1).result.text.startsWith(MARKER));
  assert.deepEqual(byId.get(2), { id: 2, ok: false, error: { code: "invalid_request", message: byId.get(2).error.message } });
  assert.equal(byId.get(3).ok, true);
  assert.equal(byId.get(3).result.status, "ran");

  // A page gone before its answer (postMessage throws) breaks nothing: the result stays kept.
  port.postMessage = () => {
    throw new Error("Attempting to use a disconnected port object");
  };
  port.deliver({ id: 4, type: "prompt" });
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(stored.has(`bridge:result:${SCOPE}:${KEY}`), true);
});
