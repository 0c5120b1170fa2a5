/**
 * The Worker's entry, where the handlers are put together (no other module imports this one or
 * the routes it composes). The per-client rate limits come first (src/rate_limit.ts); then the
 * OAuth library routes: its metadata documents, /register, /token and /mcp (token checked, the
 * grant's use noted, then the relay's handler with the grant's props); every other request comes
 * to `routes` below. /token goes through strict refresh rotation first (src/token.ts). The
 * Durable Object classes are exported from here, as wrangler.jsonc's `main` requires.
 */

import { authorize, consentStatus } from "./consent.js";
import { handleControl } from "./control.js";
import type { Env } from "./env.js";
import { recordingGrantUse } from "./grants.js";
import { errorResponse, jsonResponse, readJsonObject } from "./http.js";
import { type FetchHandler, originOf, providerFor, type RoutedHandlers } from "./oauth.js";
import { connectLink, isAdmin, redeemPairing, startPairing } from "./pairing.js";
import { limitedRoute, rateLimited } from "./rate_limit.js";
import { registry } from "./registry.js";
import { installOutboundGuard, outboundRefusal } from "./outbound.js";
import { mcpApiHandler } from "./relay/mcp.js";
import { statusResponse } from "./relay/status.js";
import { tokenEndpoint } from "./token.js";

export { DeviceRelay } from "./relay/device_relay.js";
export { EdgeRegistry } from "./registry.js";

// Every outbound fetch of this isolate (the library's client metadata documents) goes through
// the host check (src/outbound.ts).
installOutboundGuard();

/** The Edge's own version, shown by /health. */
const EDGE_VERSION = "0.1.0";

/** The request's path, or null when its URL does not parse. */
function requestPath(request: Request): string | null {
  try {
    return new URL(request.url).pathname;
  } catch {
    return null;
  }
}

const routes: FetchHandler = {
  async fetch(request, env): Promise<Response> {
    const pathname = requestPath(request) ?? "";
    const method = request.method;
    if (pathname === "/health" && method === "GET") return jsonResponse({ status: "ok", edge_version: EDGE_VERSION });
    if (pathname === "/authorize" && method === "GET") return authorize(request, env);
    if (pathname === "/authorize/status" && method === "POST") return consentStatus(request, env);
    if (pathname === "/pair" || pathname.startsWith("/link/")) {
      const missing = missingSecrets(env);
      if (missing.length > 0) {
        return errorResponse(503, "edge_not_configured", `set ${missing.join(" and ")} with \`npx wrangler secret put\` (edge/README.md)`);
      }
    }
    if (pathname === "/pair" && method === "GET") return startPairing(request, env);
    if (pathname === "/link/pair" && method === "POST") return redeemPairing(request, env);
    if (pathname === "/link/connect" && method === "GET") return connectLink(request, env);
    if (pathname.startsWith("/status/") && method === "GET") return statusResponse(request, env, pathname.slice("/status/".length));
    if (pathname.startsWith("/__test/") && env.EDGE_TEST_ROUTES === "1") return testRoute(request, env, pathname);
    return errorResponse(404, "not_found", `no route ${method} ${pathname}`);
  },
};

/** What the OAuth library routes to (src/oauth.ts). */
const handlers: RoutedHandlers = { api: recordingGrantUse(mcpApiHandler), fallback: routes };

/** Both secrets guard pairing and the links: unset or short, those routes refuse to run (an
 * HMAC under an empty key would verify nothing). 32 characters: `openssl rand -base64 32` gives 44. */
const SECRET_MIN_CHARS = 32;

function missingSecrets(env: Env): string[] {
  return (["ADMIN_SECRET", "EDGE_HMAC_KEY"] as const).filter(
    (name) => typeof env[name] !== "string" || env[name].length < SECRET_MIN_CHARS,
  );
}

/**
 * Test configuration only (EDGE_TEST_ROUTES=1, set by tests/support/edge_harness.py, never by
 * wrangler.jsonc), and then still behind ADMIN_SECRET:
 * - `POST /__test/control` `{device_id, method, params}` runs a control method as the relay will;
 * - `POST /__test/clock` `{offset_s}` shifts the registry's clock (pairing and consent expiry);
 * - `POST /__test/kv` `{op: "get"|"put"|"delete"|"list", key, value?}` reads or writes the OAuth
 *   library's KV directly (list: the keys under the prefix `key`): what a lagging KV read or list
 *   would show (a new key missing, a deleted one still there);
 * - `POST /__test/legacy-grant` `{grant_id}` turns a grant into one made before the registry
 *   recorded grants (only the library's KV has it);
 * - `POST /__test/outbound` `{url}` answers how workerd's URL parser reads `url` (its hostname)
 *   and why the outbound check refuses it (null: it would be fetched); nothing is fetched.
 */
async function testRoute(request: Request, env: Env, pathname: string): Promise<Response> {
  if (request.method !== "POST" || !(await isAdmin(request, env))) {
    return errorResponse(401, "admin_unauthorized", "test routes need POST and the ADMIN_SECRET");
  }
  const body = (await readJsonObject(request, 65536)) ?? {};
  if (pathname === "/__test/control") {
    const params = body["params"];
    return jsonResponse(
      await handleControl(
        env,
        String(body["device_id"]),
        String(body["method"]),
        typeof params === "object" && params !== null ? (params as Record<string, unknown>) : {},
      ),
    );
  }
  if (pathname === "/__test/clock") {
    await registry(env).setClockOffset(Number(body["offset_s"] ?? 0));
    return jsonResponse({ offset_s: await registry(env).now() });
  }
  if (pathname === "/__test/kv") {
    if (body["op"] === "list") {
      const listed = await env.OAUTH_KV.list({ prefix: String(body["key"]) });
      return jsonResponse({ keys: listed.keys.map((entry) => entry.name) });
    }
    const key = String(body["key"]);
    if (body["op"] === "put") await env.OAUTH_KV.put(key, String(body["value"]));
    if (body["op"] === "delete") await env.OAUTH_KV.delete(key);
    return jsonResponse({ key, value: await env.OAUTH_KV.get(key) });
  }
  if (pathname === "/__test/outbound") {
    const url = String(body["url"]);
    let hostname: string | null = null;
    try {
      hostname = new URL(url).hostname;
    } catch {
      hostname = null;
    }
    return jsonResponse({ url, hostname, refusal: outboundRefusal(url) });
  }
  if (pathname === "/__test/legacy-grant") {
    await registry(env).forgetGrantRecordAsLegacy(String(body["grant_id"]));
    return jsonResponse({ grant_id: body["grant_id"] });
  }
  return errorResponse(404, "not_found", `no test route ${pathname}`);
}

export default {
  async fetch(request: Request, env: Env, ctx: ExecutionContext): Promise<Response> {
    // The URL comes from the Host header and the request line: one no URL parser takes is a 400
    // here, not an exception in every route below (locally, miniflare's own entry refuses most
    // such hosts before the Worker runs; edge/README.md, "Decisions").
    const pathname = requestPath(request);
    if (pathname === null) return errorResponse(400, "invalid_request_url", "the request's Host header and path do not form a URL");
    const route = limitedRoute(request.method, pathname);
    const refused = route === null ? null : await rateLimited(request, env, route);
    if (refused !== null) return refused;
    let provider: ReturnType<typeof providerFor>;
    try {
      provider = providerFor(originOf(request), handlers);
    } catch {
      // The library takes only an https origin (http on a loopback host) as its resource.
      return errorResponse(400, "invalid_origin", "the Edge answers at an https origin (http only on loopback): check the Host header");
    }
    if (pathname === "/token") return tokenEndpoint(request, env, ctx, provider);
    return provider.fetch(request, env, ctx);
  },
} satisfies ExportedHandler<Env>;
