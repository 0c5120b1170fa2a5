/**
 * Pairing a workstation and authenticating its link (docs/edge-protocol.md, "Pairing" and
 * "Connecting"):
 * - `GET /pair` (the owner, with ADMIN_SECRET) starts a pairing: a 6-digit code valid <= 10 min;
 * - `POST /link/pair` `{code, name}` (the workstation) answers device_id + device_secret once;
 * - `GET /link/connect` (the link, `Authorization: Device <id>.<secret>`) reaches the device's
 *   Durable Object only with the right secret.
 * The Edge keeps only HMAC-SHA256(EDGE_HMAC_KEY, secret) per device (src/registry.ts).
 */

import type { Env } from "./env.js";
import { constantTimeEqual, errorResponse, escapeHtml, jsonResponse, readJsonObject } from "./http.js";
import { PAIRING_TTL_MAX_S, registry } from "./registry.js";
import { relayOf } from "./relay_stub.js";

/** A pairing request is a code and a host name: 4 KiB is plenty. */
const PAIR_BODY_MAX_BYTES = 4096;
/** A device name is a host name, shown in herdr_devices. */
const DEVICE_NAME_MAX_CHARS = 100;
const DEVICE_ID_PATTERN = /^dev_[A-Za-z0-9_-]{16}$/;
const DEVICE_SECRET_PATTERN = /^[A-Za-z0-9_-]{43}$/;

/** Whether the request carries ADMIN_SECRET, as `Authorization: Bearer <secret>` or as the
 * password of HTTP Basic (any user name), compared in constant time. */
export async function isAdmin(request: Request, env: Env): Promise<boolean> {
  if (!env.ADMIN_SECRET) return false;
  const header = request.headers.get("Authorization") ?? "";
  let offered = "";
  if (header.startsWith("Bearer ")) {
    offered = header.slice("Bearer ".length);
  } else if (header.startsWith("Basic ")) {
    try {
      const decoded = atob(header.slice("Basic ".length));
      offered = decoded.slice(decoded.indexOf(":") + 1);
    } catch {
      offered = "";
    }
  }
  return constantTimeEqual(offered, env.ADMIN_SECRET);
}

/** `GET /pair`: start a pairing (replacing a pending one) and show its code. */
export async function startPairing(request: Request, env: Env): Promise<Response> {
  if (!(await isAdmin(request, env))) {
    return errorResponse(401, "admin_unauthorized", "send the ADMIN_SECRET as a Bearer token or the Basic password", {
      "WWW-Authenticate": 'Basic realm="herdr-mcp edge pairing"',
    });
  }
  const ticket = await registry(env).startPairing(PAIRING_TTL_MAX_S);
  if ((request.headers.get("Accept") ?? "").includes("text/html")) {
    return new Response(pairingPage(new URL(request.url).origin, ticket.code, ticket.expires_at), {
      headers: { "Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store", "X-Frame-Options": "DENY" },
    });
  }
  return jsonResponse({ pairing_id: ticket.pairing_id, code: ticket.code, expires_at: ticket.expires_at });
}

/** `POST /link/pair` `{code, name}`: the device id and secret, once. */
export async function redeemPairing(request: Request, env: Env): Promise<Response> {
  const body = await readJsonObject(request, PAIR_BODY_MAX_BYTES);
  const code = body?.["code"];
  const name = body?.["name"];
  if (typeof code !== "string" || !/^[0-9]{6}$/.test(code)) {
    return errorResponse(400, "invalid_argument", 'send {"code": "<the 6 digits /pair shows>", "name": "<host name>"}');
  }
  if (typeof name !== "string" || name.trim() === "" || name.length > DEVICE_NAME_MAX_CHARS) {
    return errorResponse(400, "invalid_argument", `name must be a host name of 1 to ${DEVICE_NAME_MAX_CHARS} characters`);
  }
  const result = await registry(env).redeemPairing(code, name.trim());
  if (!result.ok) {
    if (result.code === "rate_limited") {
      return errorResponse(429, result.code, result.message, { "Retry-After": String(result.retry_after_s) });
    }
    return errorResponse(result.code === "pairing_code_wrong" ? 401 : 403, result.code, result.message);
  }
  return jsonResponse({ device_id: result.device_id, device_secret: result.device_secret });
}

/** The device an `Authorization: Device <id>.<secret>` header proves, or null. */
export async function authenticatedDevice(request: Request, env: Env): Promise<string | null> {
  const header = request.headers.get("Authorization") ?? "";
  if (!header.startsWith("Device ")) return null;
  const credential = header.slice("Device ".length);
  const dot = credential.indexOf(".");
  const deviceId = credential.slice(0, dot);
  const secret = credential.slice(dot + 1);
  if (dot < 0 || !DEVICE_ID_PATTERN.test(deviceId) || !DEVICE_SECRET_PATTERN.test(secret)) return null;
  return (await registry(env).authenticateDevice(deviceId, secret)) ? deviceId : null;
}

/** `GET /link/connect`: authenticate the device, then hand the upgrade to its Durable Object. */
export async function connectLink(request: Request, env: Env): Promise<Response> {
  const deviceId = await authenticatedDevice(request, env);
  if (deviceId === null) {
    return errorResponse(401, "device_unauthorized", "wrong or unknown device secret: pair again with `herdr-mcp link pair`");
  }
  const forwarded = new Request(request);
  forwarded.headers.set("Herdr-Device-Id", deviceId);
  // The secret has done its work here; the Durable Object never sees it.
  forwarded.headers.delete("Authorization");
  return relayOf(env, deviceId).fetch(forwarded);
}

function pairingPage(origin: string, code: string, expiresAt: number): string {
  return `<!doctype html><html><head><meta charset="utf-8"><title>Pair a workstation</title></head>
<body style="font-family: system-ui; max-width: 36em; margin: 3em auto">
<h1>Pair a workstation</h1>
<p>On the workstation run:</p>
<pre>herdr-mcp link pair --edge ${escapeHtml(origin)} --code ${code}</pre>
<p style="font-size: 2.5em; letter-spacing: 0.2em"><strong>${code}</strong></p>
<p>The code works once and expires at ${new Date(expiresAt * 1000).toISOString()}. Five wrong codes lock it; reload for a new one.</p>
</body></html>`;
}
