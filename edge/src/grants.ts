/**
 * Connector grants as the Edge knows them beside the OAuth library: what a grant carries to /mcp,
 * the grant id inside a token, the record of a grant's use, and revoking a grant everywhere it is
 * known (the registry, the library's KV, the device's relay).
 */

import type { OAuthHelpers } from "@cloudflare/workers-oauth-provider";
import type { Env } from "./env.js";
import { type FetchHandler, oauthHelpers } from "./oauth.js";
import { registry } from "./registry.js";
import { relayOf } from "./relay_stub.js";

/** What a grant carries to /mcp as `ctx.props` (set when the owner approves the consent). */
export interface GrantProps {
  /** The paired device that approved the connector: /mcp relays to its Durable Object. */
  device_id: string;
  /** The consent request the grant came from. */
  request_id: string;
  client_name: string;
}

/** The library's tokens (and authorization codes) are `<user id>:<grant id>:<random>`. */
export function grantOf(token: string): { userId: string; grantId: string } | null {
  const parts = token.split(":");
  return parts.length === 3 && parts[0] && parts[1] ? { userId: parts[0], grantId: parts[1] } : null;
}

/** The helpers for grant records (list, revoke), which name no origin: any origin's helpers
 * reach the same records, so a placeholder origin serves callers that have none (a control
 * method arriving over the link). */
export function grantHelpers(env: Env): OAuthHelpers {
  return oauthHelpers("https://edge.invalid", env);
}

/**
 * Revoke a grant everywhere it is known, in this order: the registry's record, marked revoked
 * first (grant.list, and the token endpoint refuses the grant's codes and refresh tokens even
 * where a KV read still shows it; a refresh already past that check sees the mark when it ends
 * and revokes again, see src/token.ts); then the library's grant and tokens (KV); then the
 * device's relay, which refuses the grant's access tokens at once (a KV read elsewhere may show a
 * deleted token up to a minute).
 */
export async function revokeGrantEverywhere(env: Env, deviceId: string, grantId: string): Promise<void> {
  await registry(env).forgetGrant(grantId);
  await grantHelpers(env).revokeGrant(grantId, deviceId);
  await relayOf(env, deviceId).revokeGrant(grantId);
}

/** A grant's use is recorded at most once a minute per isolate (grant.list's last_used_at): one
 * write to the registry per call would put the singleton in every call's way. */
const GRANT_USE_RESOLUTION_S = 60;
const recordedUses = new Map<string, number>();

/** `handler` (the relay's /mcp, after the library checked the token) noting its grant's use first. */
export function recordingGrantUse(handler: FetchHandler): FetchHandler {
  return {
    async fetch(request: Request, env: Env, ctx: ExecutionContext & { auth?: { token: string } }): Promise<Response> {
      const grant = ctx.auth === undefined ? null : grantOf(ctx.auth.token);
      const now = Math.floor(Date.now() / 1000);
      if (grant !== null && (recordedUses.get(grant.grantId) ?? 0) + GRANT_USE_RESOLUTION_S <= now) {
        recordedUses.set(grant.grantId, now);
        ctx.waitUntil(registry(env).recordGrantUse(grant.grantId, now));
      }
      return handler.fetch(request, env, ctx);
    },
  };
}
