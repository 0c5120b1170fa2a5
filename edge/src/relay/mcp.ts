/**
 * /mcp on the Edge: Streamable HTTP MCP, stateless, answering each POST with one JSON body (no SSE
 * stream, no session id; the transport allows both). Requests reach here only with a valid token
 * (the OAuth provider checks it and puts the grant's props, the device id among them, in
 * ctx.props). tools/list is the public Edge contract, always the frozen edge epoch 8 (src/relay/
 * catalog.ts), whatever the device announces; tools/call relays a runtime tool through the
 * device's Durable Object (which refuses a device on another runtime contract,
 * `contract_mismatch`), and the Edge answers herdr_devices itself.
 *
 * Both protocol eras are served (src/relay/revisions.ts picks one per POST): the handshake
 * revisions 2024-11-05 to 2025-11-25 (initialize, ping, tools/list, tools/call), and 2026-07-28
 * natively (server/discover, tools/list, tools/call; each request checked for its `_meta` envelope
 * and routing headers, each result stamped with `resultType` and the Edge's `serverInfo`).
 */

import type { Env } from "../env.js";
import { type GrantProps, grantOf } from "../grants.js";
import { readCappedText } from "../http.js";
import { revokedTokenResponse } from "../oauth.js";
import { registry } from "../registry.js";
import { type CallOutcome, type DeviceStatus, type RelayError, relayOf } from "../relay_stub.js";
import { DEVICES_TOOL, EDGE_TOOLS, RUNTIME_TOOL_NAMES } from "./catalog.js";
import {
  checkModernRequest,
  eraOf,
  HANDSHAKE_VERSIONS,
  INVALID_PARAMS,
  INVALID_REQUEST,
  isObject,
  META_SERVER_INFO,
  METHOD_NOT_FOUND,
  MODERN_VERSIONS,
  modernErrorStatus,
  PARSE_ERROR,
  type Rejection,
  unsupportedVersion,
} from "./revisions.js";

const SERVER_INFO = { name: "herdr-mcp-edge", title: "herdr-mcp (Edge)", version: "0.1.0" };
const CAPABILITIES = { tools: { listChanged: false } };
const INSTRUCTIONS =
  "herdr-mcp relays these tools to a paired workstation. Call herdr_devices to see whether it is online; a call answered delivery_unknown may have run, so inspect before repeating it.";
/** A tools/call's arguments must fit one relay frame anyway; a body this size is refused first. */
const MAX_BODY_BYTES = 1024 * 1024;

type JsonRpcId = string | number;

export const mcpApiHandler = {
  async fetch(request: Request, env: Env, ctx: ExecutionContext): Promise<Response> {
    if (request.method !== "POST") {
      return new Response(null, { status: 405, headers: { Allow: "POST" } });
    }
    const text = await readCappedText(request, MAX_BODY_BYTES);
    if (text === null) {
      return rpcError(null, INVALID_REQUEST, `request body larger than ${MAX_BODY_BYTES} bytes`, 413);
    }
    let message: unknown;
    try {
      message = JSON.parse(text);
    } catch {
      return rpcError(null, PARSE_ERROR, "the body is not JSON", 400);
    }
    if (!isObject(message)) {
      return rpcError(null, INVALID_REQUEST, "send one JSON-RPC message per POST (batches are not supported)", 400);
    }
    const era = eraOf(request.headers, message);
    if (era.era === "contradiction") return rejected(requestIdOf(message), era.rejection);
    const modern = era.era === "modern";
    const method = message["method"];
    const id = message["id"];
    if (typeof method !== "string") {
      // A response or error from the client: the Edge sends no requests, so there is nothing to
      // match. The 2026-07-28 transport forbids posting one at all.
      return modern
        ? rpcError(null, INVALID_REQUEST, "send a JSON-RPC request or notification (a POST never carries a response)", 400)
        : new Response(null, { status: 202 });
    }
    const props = ctx.props as GrantProps;
    const params = isObject(message["params"]) ? message["params"] : {};
    if (id === undefined) {
      // A notification has no _meta to check; only the header that brought it here (the SDK's
      // server does the same): a revision not served is told so.
      const header = request.headers.get("MCP-Protocol-Version");
      const unsupported = modern && header !== null ? unsupportedVersion(header) : null;
      if (unsupported !== null) return rejected(null, unsupported);
      if (method === "notifications/cancelled" && (typeof params["requestId"] === "string" || typeof params["requestId"] === "number")) {
        await relayOf(env, props.device_id).cancel(await cancelKey(request, params["requestId"]));
      }
      return new Response(null, { status: 202 });
    }
    if (typeof id !== "string" && typeof id !== "number") {
      return rpcError(null, INVALID_REQUEST, "id must be a string or a number", 400);
    }
    const incoming: Incoming = { request, env, props, id, method, params };
    return modern ? modernRequest(incoming) : handshakeRequest(incoming);
  },
};

/** One JSON-RPC request to answer: the POST it came in, its grant's props, its id and params. */
interface Incoming {
  request: Request;
  env: Env;
  props: GrantProps;
  id: JsonRpcId;
  method: string;
  params: Record<string, unknown>;
}

/** A request of the handshake era (2024-11-05 to 2025-11-25), answered as it always was. */
async function handshakeRequest(incoming: Incoming): Promise<Response> {
  const { id, method, params } = incoming;
  switch (method) {
    case "initialize":
      return rpcResult(id, initializeResult(params));
    case "ping":
      return rpcResult(id, {});
    case "tools/list":
      return rpcResult(id, { tools: EDGE_TOOLS });
    case "tools/call": {
      const outcome = await callTool(incoming, false);
      return outcome instanceof Response ? outcome : rpcResult(id, outcome);
    }
    default:
      return rpcError(id, METHOD_NOT_FOUND, `method ${method} is not served here`, 200);
  }
}

/** A 2026-07-28 request: its envelope and headers checked, then server/discover, tools/list or
 * tools/call; each result says `resultType` and carries the Edge's identity in `_meta`. An error
 * is answered with the status the revision gives its code. */
async function modernRequest(incoming: Incoming): Promise<Response> {
  const { id, method, params } = incoming;
  const checked = checkModernRequest(incoming.request.headers, method, params);
  if ("code" in checked) return rejected(id, checked);
  switch (method) {
    case "server/discover":
      return rpcResult(
        id,
        stamped({ supportedVersions: MODERN_VERSIONS, capabilities: CAPABILITIES, instructions: INSTRUCTIONS, ...NOT_CACHED }),
      );
    case "tools/list":
      return rpcResult(id, stamped({ tools: EDGE_TOOLS, ...NOT_CACHED }));
    case "tools/call": {
      const outcome = await callTool(incoming, true);
      return outcome instanceof Response ? outcome : rpcResult(id, stamped(outcome));
    }
    case "initialize":
      return rejected(id, {
        code: METHOD_NOT_FOUND,
        message: `initialize is the handshake of ${HANDSHAKE_VERSIONS.join(", ")}; 2026-07-28 has none (send it without the 2026-07-28 header to use the handshake)`,
      });
    default:
      return rejected(id, { code: METHOD_NOT_FOUND, message: `method ${method} is not served at 2026-07-28` });
  }
}

/** The cache hints the 2026-07-28 schema requires on DiscoverResult and ListToolsResult: the
 * answers are the same for every grant, but nothing asks intermediaries to share them and a
 * redeploy may change them, so each may be reused only within the token that fetched it and is
 * stale at once. The runtime's SDK server gives the same hints. */
const NOT_CACHED = { ttlMs: 0, cacheScope: "private" };

/** A 2026-07-28 result: `resultType` (required from that revision; a relayed result keeps its
 * own) and the Edge's `serverInfo` stamp in `_meta` (the Edge is the server its client talks to,
 * so it replaces the runtime's; the rest of a relayed `_meta` stays). */
function stamped(result: Record<string, unknown>): Record<string, unknown> {
  const meta = isObject(result["_meta"]) ? result["_meta"] : {};
  return {
    ...result,
    resultType: typeof result["resultType"] === "string" ? result["resultType"] : "complete",
    _meta: { ...meta, [META_SERVER_INFO]: SERVER_INFO },
  };
}

/** Version negotiation: the client's revision when it is a handshake one the Edge speaks, else the
 * newest handshake revision (2026-07-28 has no handshake, so an initialize naming it gets
 * 2025-11-25, as the specification's dual-era servers do). */
function initializeResult(params: Record<string, unknown>): Record<string, unknown> {
  const asked = params["protocolVersion"];
  const protocolVersion =
    typeof asked === "string" && HANDSHAKE_VERSIONS.includes(asked) ? asked : HANDSHAKE_VERSIONS[HANDSHAKE_VERSIONS.length - 1];
  return { protocolVersion, capabilities: CAPABILITIES, serverInfo: SERVER_INFO, instructions: INSTRUCTIONS };
}

/** tools/call: the CallToolResult, or the Response that answers the POST instead (a 401 for a
 * revoked grant, a -32602 for params that are not a call; its status is the era's). */
async function callTool(incoming: Incoming, modern: boolean): Promise<Record<string, unknown> | Response> {
  const { request, env, props, id, params } = incoming;
  const name = params["name"];
  const args = params["arguments"] ?? {};
  if (typeof name !== "string" || !isObject(args)) {
    const message = "tools/call needs params.name (a string) and params.arguments (an object)";
    return modern ? rejected(id, { code: INVALID_PARAMS, message }) : rpcError(id, INVALID_PARAMS, message, 200);
  }
  // The grant of the bearer token: a revoked one is refused here at once, though its token may
  // still pass the library's KV read for a minute (src/grants.ts, revokeGrantEverywhere).
  const grantId = grantOf((request.headers.get("Authorization") ?? "").replace(/^Bearer\s+/i, ""))?.grantId ?? null;
  if (name === DEVICES_TOOL.name) {
    if (grantId !== null && (await relayOf(env, props.device_id).grantRevoked(grantId))) return revokedTokenResponse(request);
    if (Object.keys(args).length > 0) return errorResult(invalidArgument("herdr_devices takes no arguments"));
    return jsonResult({ devices: await devices(env, props.device_id) });
  }
  if (!RUNTIME_TOOL_NAMES.has(name)) {
    return errorResult({ code: "unknown_tool", message: `no tool ${name} in the Edge's contract (epoch 8); call tools/list`, retryable: false, delivery_state: "not_delivered" });
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
  return "error" in outcome ? errorResult(outcome.error) : outcome.result;
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

/** A 2026-07-28 error answer (or a handshake-era one of the same codes, which 2026-07-28 defined
 * the statuses of) with its data, if any. */
function rejected(id: JsonRpcId | null, rejection: Rejection): Response {
  const error = rejection.data === undefined ? { code: rejection.code, message: rejection.message } : rejection;
  return Response.json(
    { jsonrpc: "2.0", id, error },
    { status: modernErrorStatus(rejection.code), headers: { "Cache-Control": "no-store" } },
  );
}

/** The id of a request whose answer is an error found before it was read (null when it has none
 * a response could carry). */
function requestIdOf(message: Record<string, unknown>): JsonRpcId | null {
  const id = message["id"];
  return typeof id === "string" || typeof id === "number" ? id : null;
}
