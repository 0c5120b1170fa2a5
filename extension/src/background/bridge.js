// The JSON-to-MCP bridge, worker side (seed 002): content scripts on chat.z.ai and
// chat.deepseek.com connect a port named "bridge" and ask for the protocol prompt (built from the
// live tools/list) and to run the tool calls of a model reply. Calls go to the runtime's /mcp
// through the native host as stateless MCP 2026-07-28 (docs/browser-protocol.md section 4), with
// `_meta["herdr-mcp/scope"]` set to the conversation's scope.
//
// Exactly-once as far as the page can tell: a reply's key (scope, anchor, text) is recorded in
// `bridge:dispatched:<scope>` BEFORE its first call is sent, and the finished TOOL_RESULT text in
// `bridge:result:<scope>:<key>` until the page confirms it was sent. A reloaded page that still
// ends with that reply gets the stored result (nothing runs again); without a stored result, calls
// are re-run only when every one of them is read-only (`readOnlyHint`): a mutation never twice.

import { cleanResult } from "../lib/bridge-clean.js";
import {
  checkCalls,
  idempotencyProperty,
  MAX_CALLS_PER_REPLY,
  parseCalls,
  protocolPrompt,
  recoveryDecision,
  resultMessage,
  runsInParallel,
} from "../lib/bridge-protocol.js";
import * as keys from "../lib/storage-keys.js";
import * as store from "./store.js";

export const MCP_PROTOCOL = "2026-07-28";
/** tools/list is asked again after this long (a new runtime generation may bring new tools). */
const TOOLS_TTL_MS = 60_000;
/** A tool call may run for minutes; the host's own read timeout is 300 s. */
const CALL_TIMEOUT_MS = 310_000;
/** Dispatched reply keys kept per scope. */
const DISPATCHED_KEPT = 200;
const SCOPE = /^(zai|deepseek):conv:[A-Za-z0-9_-]{1,128}$/;

export class BridgeError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

export class Bridge {
  constructor(native, { log = console } = {}) {
    this.native = native;
    this.log = log;
    this.tools = null;
    this.toolsAt = 0;
    /** `<scope> <key>` -> the promise of that reply's run (a reloaded page waits for it). */
    this.inFlight = new Map();
    this.nextRpc = 1;
  }

  attach(port) {
    port.onMessage.addListener((message) => {
      this.received(message).then(
        (result) => safePost(port, { id: message?.id, ok: true, result }),
        (error) => safePost(port, { id: message?.id, ok: false, error: { code: error.code ?? "failed", message: error.message } }),
      );
    });
  }

  async received(message) {
    switch (message?.type) {
      case "prompt":
        return { text: protocolPrompt(await this.listTools(true)) };
      case "run":
        return this.run(message);
      case "delivered":
        await store.remove(keys.bridgeResult(checkScope(message.scope), message.key));
        return {};
      default:
        throw new BridgeError("invalid_request", `unknown bridge request ${message?.type}`);
    }
  }

  async mcp(method, params, name = null) {
    const headers = { "mcp-protocol-version": MCP_PROTOCOL, "mcp-method": method };
    if (name) {
      headers["mcp-name"] = name;
    }
    const meta = {
      ...(params._meta ?? {}),
      "io.modelcontextprotocol/protocolVersion": MCP_PROTOCOL,
      "io.modelcontextprotocol/clientCapabilities": {},
      "io.modelcontextprotocol/clientInfo": { name: "herdr-mcp-extension-bridge", version: chrome.runtime.getManifest().version },
    };
    const body = { jsonrpc: "2.0", id: this.nextRpc++, method, params: { ...params, _meta: meta } };
    const answer = await this.native.request("POST", "/mcp", body, { headers, timeoutMs: CALL_TIMEOUT_MS });
    if (answer?.error) {
      throw new BridgeError("mcp_error", `${method}: ${answer.error.message ?? JSON.stringify(answer.error)}`);
    }
    return answer?.result;
  }

  async listTools(force = false) {
    if (!force && this.tools && Date.now() - this.toolsAt < TOOLS_TTL_MS) {
      return this.tools;
    }
    const tools = [];
    let cursor;
    do {
      const page = await this.mcp("tools/list", cursor ? { cursor } : {});
      tools.push(...(page?.tools ?? []));
      cursor = page?.nextCursor;
    } while (cursor);
    this.tools = tools;
    this.toolsAt = Date.now();
    return tools;
  }

  /**
   * `{scope, key, text, code, messages, recovering}` -> `{status: "ran"|"stored"|"skipped", reason, text?}`.
   * `text` is the model reply, `code` the texts of its code blocks as the page holds them;
   * `messages` the conversation (`{role, text, code}`) for the reload rule. A request for a reply
   * whose calls are running (a page reloaded during a long call) waits for them and gets their
   * result as kept: it is delivered by the page that asks, once.
   */
  async run({ scope, key, text, code = [], messages = [], recovering = false }) {
    checkScope(scope);
    if (typeof key !== "string" || !/^[0-9a-f]{32}$/.test(key)) {
      throw new BridgeError("invalid_request", "a reply key is 32 hex digits");
    }
    const flight = `${scope} ${key}`;
    const running = this.inFlight.get(flight);
    if (running) {
      const first = await running.catch(() => null);
      const kept = await store.get(keys.bridgeResult(scope, key), null);
      if (kept) {
        return { status: "stored", reason: "the calls running when the page reloaded finished; their result is sent", text: kept };
      }
      return { status: "skipped", reason: first?.reason ?? "this reply was handled already" };
    }
    // Registered before the first await, so a second request for the same reply always waits.
    const work = this.runOnce({ scope, key, text, code, messages, recovering });
    this.inFlight.set(flight, work);
    try {
      return await work;
    } finally {
      this.inFlight.delete(flight);
    }
  }

  async runOnce({ scope, key, text, code, messages, recovering }) {
    const stored = await store.get(keys.bridgeResult(scope, key), null);
    if (stored) {
      return { status: "stored", reason: "the result of this reply was kept; it is sent, nothing runs again", text: stored };
    }
    const { calls, errors } = parseCalls(text, Array.isArray(code) ? code : []);
    if (calls.length === 0 && errors.length === 0) {
      return { status: "skipped", reason: "no calls" };
    }
    const tools = await this.listTools();
    const checked = checkCalls(calls.slice(0, MAX_CALLS_PER_REPLY), tools);
    const dispatched = (await store.get(keys.bridgeDispatched(scope), [])).includes(key);
    if (recovering) {
      const decision = recoveryDecision({ messages, dispatched, checked });
      if (!decision.run) {
        return { status: "skipped", reason: decision.reason };
      }
    } else if (dispatched) {
      return { status: "skipped", reason: "already dispatched" };
    }
    await store.update(keys.bridgeDispatched(scope), [], (sent) => [...sent.filter((item) => item !== key), key].slice(-DISPATCHED_KEPT));
    const answers = await this.execute(scope, key, checked);
    for (const extra of calls.slice(MAX_CALLS_PER_REPLY)) {
      answers.push({ tool: extra.tool, isError: true, text: `not run: at most ${MAX_CALLS_PER_REPLY} calls per reply` });
    }
    for (const error of errors) {
      answers.push({ tool: "(call)", isError: true, text: `invalid_call: ${error}` });
    }
    const message = resultMessage(answers);
    await store.set(keys.bridgeResult(scope, key), message);
    return { status: "ran", reason: runsInParallel(checked) ? "in parallel" : "in order", text: message };
  }

  async execute(scope, key, checked) {
    const one = (call) => (call.error ? Promise.resolve({ tool: call.tool, isError: true, text: call.error }) : this.callTool(scope, key, call));
    if (runsInParallel(checked)) {
      return Promise.all(checked.map(one));
    }
    const answers = [];
    for (const call of checked) {
      answers.push(await one(call));
    }
    return answers;
  }

  async callTool(scope, key, call) {
    const args = { ...call.args };
    const property = idempotencyProperty(call.schema);
    if (property && args[property] === undefined) {
      args[property] = `bridge-${key}-${call.index}`; // the same reply and call: the same key
    }
    try {
      const result = await this.mcp("tools/call", { name: call.tool, arguments: args, _meta: { "herdr-mcp/scope": scope } }, call.tool);
      const cleaned = cleanResult(result);
      return { tool: call.tool, isError: cleaned.isError, text: cleaned.text };
    } catch (error) {
      // The call may have run (a timeout, a host that went away): say so rather than guess.
      return { tool: call.tool, isError: true, text: `${error.code ?? "failed"}: ${error.message}` };
    }
  }
}

function checkScope(scope) {
  if (typeof scope !== "string" || !SCOPE.test(scope)) {
    throw new BridgeError("invalid_request", "the bridge runs only in a zai:conv:<id> or deepseek:conv:<id> conversation");
  }
  return scope;
}

function safePost(port, message) {
  try {
    port.postMessage(message);
  } catch {
    // the page went away; a reloaded page asks again and gets the stored result
  }
}
