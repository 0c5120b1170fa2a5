/**
 * Per-client-IP rate limits on the Edge's open endpoints, on Cloudflare's Workers Rate Limiting
 * binding (`RATE_LIMIT` in wrangler.jsonc: 60 requests per 60 s per key, counted per Cloudflare
 * location). Each limited route counts apart, keyed `<route>:<client>`, the client being the
 * `CF-Connecting-IP` Cloudflare sets (an IPv6 address by its /64: one host holds a whole /64).
 * Checked before anything else runs (no KV read, no Durable Object call), so a flood costs little.
 *
 * A refusal is 429 with `Retry-After` (the binding's period: the binding tells no more than
 * "over the limit", so the period is the longest a client waits) and the code `rate_limited`, in
 * the shape of the endpoint: RFC 6749 error JSON on the OAuth endpoints (/register, /token), the
 * Edge's `{"error": {code, message}}` on /pair and /link/pair, an error page on /authorize.
 *
 * Not limited here: /mcp (every request carries a token the library checks), /authorize/status
 * (the consent page polls it every 2 s), /link/connect (a link reconnects by itself; its secret
 * has 256 bits), /health and /status/<device>. The cap on wrong pairing codes across all pairings
 * is the registry's (src/registry.ts).
 */

import type { Env } from "./env.js";
import { errorResponse, escapeHtml } from "./http.js";

/** The binding's period (wrangler.jsonc `ratelimits[0].simple.period`). */
export const RATE_LIMIT_PERIOD_S = 60;

/** The routes counted, each apart from the others. */
export type LimitedRoute = "register" | "authorize" | "token" | "pair" | "link-pair";

/** The route a request counts against, or null when it is not limited. */
export function limitedRoute(method: string, pathname: string): LimitedRoute | null {
  if (pathname === "/register" && method === "POST") return "register";
  if (pathname === "/authorize" && method === "GET") return "authorize";
  if (pathname === "/token" && method === "POST") return "token";
  if (pathname === "/pair" && method === "GET") return "pair";
  if (pathname === "/link/pair" && method === "POST") return "link-pair";
  return null;
}

/** The answer refusing `request` when its client is over the limit of `route`, else null. */
export async function rateLimited(request: Request, env: Env, route: LimitedRoute): Promise<Response | null> {
  const { success } = await env.RATE_LIMIT.limit({ key: `${route}:${clientKey(request)}` });
  if (success) return null;
  const retryAfter = String(RATE_LIMIT_PERIOD_S);
  const message = `too many requests to this endpoint from your address; try again in ${retryAfter} s`;
  if (route === "register" || route === "token") {
    return Response.json(
      { error: "rate_limited", error_description: message },
      { status: 429, headers: { "Retry-After": retryAfter, "Cache-Control": "no-store" } },
    );
  }
  if (route === "authorize") {
    return new Response(
      `<!doctype html><html><head><meta charset="utf-8"><title>Too many requests</title></head><body><h1>Too many requests</h1><p><code>rate_limited</code>: ${escapeHtml(message)}</p></body></html>`,
      {
        status: 429,
        headers: {
          "Content-Type": "text/html; charset=utf-8",
          "Cache-Control": "no-store",
          "Retry-After": retryAfter,
          "X-Error-Code": "rate_limited",
        },
      },
    );
  }
  return errorResponse(429, "rate_limited", message, { "Retry-After": retryAfter });
}

/** The client a request is counted for: its CF-Connecting-IP, an IPv6 address cut to its /64. */
export function clientKey(request: Request): string {
  const address = request.headers.get("CF-Connecting-IP")?.trim() ?? "";
  if (address === "") return "unknown";
  if (!address.includes(":")) return address;
  const groups = expandIpv6(address);
  return groups === null ? address : `${groups.slice(0, 4).join(":")}::/64`;
}

/** The eight 16-bit groups of an IPv6 address (lower-case hex, no leading zeros), or null. An
 * embedded IPv4 tail (::ffff:1.2.3.4) is two groups. */
function expandIpv6(address: string): string[] | null {
  let text = address.toLowerCase();
  const v4 = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (v4 !== null) {
    const [a, b, c, d] = v4.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, v4.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const halves = text.split("::");
  if (halves.length > 2) return null;
  const head = halves[0] ? halves[0].split(":") : [];
  const tail = halves.length === 2 && halves[1] ? halves[1].split(":") : [];
  const missing = 8 - head.length - tail.length;
  if ((halves.length === 1 && missing !== 0) || missing < 0) return null;
  const groups = [...head, ...Array<string>(missing).fill("0"), ...tail];
  if (!groups.every((group) => /^[0-9a-f]{1,4}$/.test(group))) return null;
  return groups.map((group) => parseInt(group, 16).toString(16));
}
