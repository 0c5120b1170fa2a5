/**
 * /mcp on the Edge: Streamable HTTP MCP, stateless, answering each POST with one JSON body (no SSE
 * stream, no session id; the transport allows both). Requests reach here only with a valid token
 * (the OAuth provider checks it and puts the grant's props, the device id among them, in
 * ctx.props). tools/list is the public Edge contract, always the frozen edge epoch 8 (src/relay/
 * catalog.ts), whatever the device announces; tools/call relays a runtime tool through the
 * device's Durable Object (which refuses a device on another runtime contract,
 * `contract_mismatch`), and the Edge answers herdr_devices itself.
 */

import type { Env } from "../env.js";
import { type GrantProps, grantOf, revokedTokenResponse } from "../oauth.js";
import { registry } from "../registry.js";
import { DEVICES_TOOL, EDGE_TOOLS, RUNTIME_TOOL_NAMES } from "./catalog.js";
import type { CallOutcome, DeviceRelay, DeviceStatus, RelayError } from "./device_relay.js";

/** The revisions reachable through `initialize`, oldest first (the last is offered by default). */
export const PROTOCOL_VERSIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"] as const;
const SERVER_INFO = { name: "herdr-mcp-edge", title: "herdr-mcp (Edge)", version: "0.1.0" };
/** A tools/call's arguments must fit one relay frame anyway; a body this size is refused first. */
const MAX_BODY_BYTES = 1024 * 1024;

// JSON-RPC 2.0 error codes.
const PARSE_ERROR = -32700;
const INVALID_REQUEST = -32600;
const METHOD_NOT_FOUND = -32601;
const INVALID_PARAMS = -32602;

type JsonRpcId = string | number;

/** The RPC methods of DeviceRelay as the Worker calls them. Their values are plain JSON data, which
 * RPC passes by structured clone unchanged; declared here because workers-types' derived stub type
 * of the recursive JSON catalog types is too deep for tsc. */
export interface RelayStub {
  call: DeviceRelay["call"];
  cancel: DeviceRelay["cancel"];
  grantRevoked: DeviceRelay["grantRevoked"];
  revokeGrant: DeviceRelay["revokeGrant"];
  status: DeviceRelay["status"];
}

/** The device's relay object. */
export function relayOf(env: Env, deviceId: string): RelayStub {
  return env.DEVICE_RELAY.get(env.DEVICE_RELAY.idFromName(deviceId)) as unknown as RelayStub;
}

export const mcpApiHandler = {
  async fetch(request: Request, env: Env, ctx: ExecutionContext): Promise<Response> {
    if (request.method !== "POST") {
      return new Response(null, { status: 405, headers: { Allow: "POST" } });
    }
    const version = request.headers.get("MCP-Protocol-Version");
    if (version !== null && !(PROTOCOL_VERSIONS as readonly string[]).includes(version)) {
      return rpcError(null, INVALID_REQUEST, `unsupported MCP-Protocol-Version ${version}; supported: ${PROTOCOL_VERSIONS.join(", ")}`, 400);
    }
    const text = await request.text();
    if (new TextEncoder().encode(text).byteLength > MAX_BODY_BYTES) {
      return rpcError(null, INVALID_REQUEST, `request body larger than ${MAX_BODY_BYTES} bytes`, 413);
    }
    let message: unknown;
    try {
      message = JSON.parse(text);
    } catch {
      return rpcError(null, PARSE_ERROR, "the body is not JSON", 400);
    }
    if (typeof message !== "object" || message === null || Array.isArray(message)) {
      return rpcError(null, INVALID_REQUEST, "send one JSON-RPC message per POST (batches are not supported)", 400);
    }
    const body = message as Record<string, unknown>;
    const method = body["method"];
    const id = body["id"];
    if (typeof method !== "string") {
      // A response or error from the client: the Edge sends no requests, so there is nothing to match.
      return new Response(null, { status: 202 });
    }
    const props = ctx.props as GrantProps;
    const params = isObject(body["params"]) ? body["params"] : {};
    if (id === undefined) {
      if (method === "notifications/cancelled" && (typeof params["requestId"] === "string" || typeof params["requestId"] === "number")) {
        await relayOf(env, props.device_id).cancel(await cancelKey(request, params["requestId"]));
      }
      return new Response(null, { status: 202 });
    }
    if (typeof id !== "string" && typeof id !== "number") {
      return rpcError(null, INVALID_REQUEST, "id must be a string or a number", 400);
    }
    switch (method) {
      case "initialize":
        return rpcResult(id, initializeResult(params));
      case "ping":
        return rpcResult(id, {});
      case "tools/list":
        return rpcResult(id, { tools: EDGE_TOOLS });
      case "tools/call":
        return callTool(request, env, props, id, params);
      default:
        return rpcError(id, METHOD_NOT_FOUND, `method ${method} is not served here`, 200);
    }
  },
};

/** Version negotiation: the client's revision when the Edge speaks it, else the newest. */
function initializeResult(params: Record<string, unknown>): Record<string, unknown> {
  const asked = params["protocolVersion"];
  const protocolVersion =
    typeof asked === "string" && (PROTOCOL_VERSIONS as readonly string[]).includes(asked)
      ? asked
      : PROTOCOL_VERSIONS[PROTOCOL_VERSIONS.length - 1];
  return {
    protocolVersion,
    capabilities: { tools: { listChanged: false } },
    serverInfo: SERVER_INFO,
    instructions:
      "herdr-mcp relays these tools to a paired workstation. Call herdr_devices to see whether it is online; a call answered delivery_unknown may have run, so inspect before repeating it.",
  };
}

async function callTool(
  request: Request,
  env: Env,
  props: GrantProps,
  id: JsonRpcId,
  params: Record<string, unknown>,
): Promise<Response> {
  const name = params["name"];
  const args = params["arguments"] ?? {};
  if (typeof name !== "string" || !isObject(args)) {
    return rpcError(id, INVALID_PARAMS, "tools/call needs params.name (a string) and params.arguments (an object)", 200);
  }
  // The grant of the bearer token: a revoked one is refused here at once, though its token may
  // still pass the library's KV read for a minute (src/oauth.ts, revokeGrantEverywhere).
  const grantId = grantOf((request.headers.get("Authorization") ?? "").replace(/^Bearer\s+/i, ""))?.grantId ?? null;
  if (name === DEVICES_TOOL.name) {
    if (grantId !== null && (await relayOf(env, props.device_id).grantRevoked(grantId))) return revokedTokenResponse(request);
    if (Object.keys(args).length > 0) return rpcResult(id, errorResult(invalidArgument("herdr_devices takes no arguments")));
    return rpcResult(id, jsonResult({ devices: await devices(env, props.device_id) }));
  }
  if (!RUNTIME_TOOL_NAMES.has(name)) {
    return rpcResult(id, errorResult({ code: "unknown_tool", message: `no tool ${name} in the Edge's contract (epoch 8); call tools/list`, retryable: false, delivery_state: "not_delivered" }));
  }
  let outcome: CallOutcome;
  try {
    outcome = await relayOf(env, props.device_id).call(name, args, await cancelKey(request, id), grantId);
  } catch {
    // The object was reset (a deploy, an eviction) while the call was in flight: it may have run.
    outcome = {
      error: {
        code: "relay_reset",
        message: "the Edge's relay restarted during the call; it may have run, check before repeating it",
        retryable: false,
        delivery_state: "delivery_unknown",
      },
    };
  }
  if ("error" in outcome && outcome.error.code === "grant_revoked") return revokedTokenResponse(request);
  return rpcResult(id, "error" in outcome ? errorResult(outcome.error) : outcome.result);
}

/** herdr_devices: every paired device with its relay's status; `current` marks the grant's own. */
async function devices(env: Env, grantDevice: string): Promise<Record<string, unknown>[]> {
  const paired = await registry(env).listDevices();
  return Promise.all(
    paired.map(async (device) => {
      const status: DeviceStatus = await relayOf(env, device.device_id).status();
      return {
        ...status,
        device_id: device.device_id,
        name: device.name,
        paired_at: new Date(device.paired_at * 1000).toISOString(),
        current: device.device_id === grantDevice,
      };
    }),
  );
}

/** What notifications/cancelled names a call by: the request id within this bearer's calls
 * (hashed: the token itself stays out of the relay). */
async function cancelKey(request: Request, id: JsonRpcId): Promise<string> {
  const text = `${request.headers.get("Authorization") ?? ""}\n${JSON.stringify(id)}`;
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(digest), (byte) => byte.toString(16).padStart(2, "0")).join("");
}

function invalidArgument(message: string): RelayError {
  return { code: "invalid_argument", message, retryable: false, delivery_state: "not_delivered" };
}

/** A tool error the way the runtime shapes its own: `{"error": {...}}` as text and structured. */
function errorResult(error: RelayError): Record<string, unknown> {
  return { ...jsonResult({ error }), isError: true };
}

function jsonResult(payload: Record<string, unknown>): Record<string, unknown> {
  return { content: [{ type: "text", text: JSON.stringify(payload) }], structuredContent: payload };
}

function rpcResult(id: JsonRpcId, result: unknown): Response {
  return Response.json({ jsonrpc: "2.0", id, result }, { headers: { "Cache-Control": "no-store" } });
}

function rpcError(id: JsonRpcId | null, code: number, message: string, status: number): Response {
  return Response.json({ jsonrpc: "2.0", id, error: { code, message } }, { status, headers: { "Cache-Control": "no-store" } });
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
