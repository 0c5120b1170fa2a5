/**
 * OAuth 2.1 for MCP connectors, on @cloudflare/workers-oauth-provider: the library serves RFC 8414
 * metadata, RFC 9728 protected-resource metadata for /mcp (and the 401 challenge pointing at it),
 * dynamic client registration, client ID metadata documents, the token endpoint (authorization
 * code with PKCE S256 only: the library refuses `plain` and has no option to allow it), audience
 * binding of every token to the /mcp resource, and token validation for /mcp. Ours: the authorize page (src/consent.ts) and
 * strict refresh-token rotation (below).
 */

import { OAuthProvider, getOAuthApi, type OAuthHelpers, type OAuthProviderOptions } from "@cloudflare/workers-oauth-provider";
import type { Env } from "./env.js";
import { sha256Hex } from "./http.js";
import { mcpApiHandler, relayOf } from "./relay/index.js";
import { registry } from "./registry.js";

/** What a grant carries to /mcp as `ctx.props` (set when the owner approves the consent). */
export interface GrantProps {
  /** The paired device that approved the connector: /mcp relays to its Durable Object. */
  device_id: string;
  /** The consent request the grant came from. */
  request_id: string;
  client_name: string;
}

/** A grant's use is recorded at most once a minute per isolate (grant.list's last_used_at): one
 * write to the registry per call would put the singleton in every call's way. */
const GRANT_USE_RESOLUTION_S = 60;
const recordedUses = new Map<string, number>();

/** /mcp after the library checked the token: note the grant's use, then the relay's handler. */
const recordingApiHandler = {
  async fetch(request: Request, env: Env, ctx: ExecutionContext & { auth?: { token: string } }): Promise<Response> {
    const grant = ctx.auth === undefined ? null : grantOf(ctx.auth.token);
    const now = Math.floor(Date.now() / 1000);
    if (grant !== null && (recordedUses.get(grant.grantId) ?? 0) + GRANT_USE_RESOLUTION_S <= now) {
      recordedUses.set(grant.grantId, now);
      ctx.waitUntil(registry(env).recordGrantUse(grant.grantId, now));
    }
    return mcpApiHandler.fetch(request, env, ctx);
  },
};

/** One hour: a stolen access token is short-lived; the refresh token renews it. */
const ACCESS_TOKEN_TTL_S = 3600;
/** Thirty days of no use ends a connector (each refresh moves the end). */
const REFRESH_TOKEN_IDLE_TTL_S = 30 * 24 * 3600;

/** The provider's options for the Edge served at `origin` (scheme://host[:port]). The resource is
 * `<origin>/mcp`: a token minted for one origin is refused at another. */
export function oauthOptions(origin: string, defaultHandler: ExportedHandler<Env>): OAuthProviderOptions<Env> {
  return {
    apiRoute: "/mcp",
    apiHandler: recordingApiHandler,
    defaultHandler,
    authorizeEndpoint: `${origin}/authorize`,
    tokenEndpoint: `${origin}/token`,
    clientRegistrationEndpoint: `${origin}/register`,
    resourceMetadata: { resource: `${origin}/mcp`, resource_name: "herdr-mcp" },
    // An https client_id names the client's metadata document, fetched by the library through
    // the host check of src/outbound.ts (the library also insists on the
    // global_fetch_strictly_public flag, wrangler.jsonc); registration stays open for the rest.
    clientIdMetadataDocumentEnabled: true,
    accessTokenTTL: ACCESS_TOKEN_TTL_S,
    refreshTokenTTL: REFRESH_TOKEN_IDLE_TTL_S,
    refreshTokenIdleTTL: REFRESH_TOKEN_IDLE_TTL_S,
  };
}

/** The origin the Edge answers a request at. */
export function originOf(request: Request): string {
  return new URL(request.url).origin;
}

const providers = new Map<string, OAuthProvider<Env>>();
/** A deployment answers at one or two origins (workers.dev, a custom domain). */
const MAX_CACHED_ORIGINS = 8;

/** The provider for `origin`, built once per isolate (its options are fixed per origin). */
export function providerFor(origin: string, defaultHandler: ExportedHandler<Env>): OAuthProvider<Env> {
  let provider = providers.get(origin);
  if (provider === undefined) {
    // The origin comes from the Host header; a flood of made-up hosts must not grow this forever.
    if (providers.size >= MAX_CACHED_ORIGINS) providers.clear();
    provider = new OAuthProvider<Env>(oauthOptions(origin, defaultHandler));
    providers.set(origin, provider);
  }
  return provider;
}

/** The library's helpers outside a request it routed (the registry, the control methods). The
 * default handler is never called through them. */
export function oauthHelpers(origin: string, env: Env): OAuthHelpers {
  return getOAuthApi(oauthOptions(origin, { fetch: () => new Response(null, { status: 404 }) }), env);
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
 * and revokes again, see tokenEndpoint); then the library's grant and tokens (KV); then the
 * device's relay, which refuses the grant's access tokens at once (a KV read elsewhere may show a
 * deleted token up to a minute).
 */
export async function revokeGrantEverywhere(env: Env, deviceId: string, grantId: string): Promise<void> {
  await registry(env).forgetGrant(grantId);
  await grantHelpers(env).revokeGrant(grantId, deviceId);
  await relayOf(env, deviceId).revokeGrant(grantId);
}

/** The library's tokens (and authorization codes) are `<user id>:<grant id>:<random>`. */
export function grantOf(token: string): { userId: string; grantId: string } | null {
  const parts = token.split(":");
  return parts.length === 3 && parts[0] && parts[1] ? { userId: parts[0], grantId: parts[1] } : null;
}

/**
 * The token endpoint with strict refresh-token rotation. The library rotates refresh tokens but
 * keeps the previous one valid (a grace for a lost response) and refuses older ones without
 * touching the grant. OAuth 2.1 (section 4.3.1) asks more of public clients: a refresh token
 * works once, and a second use means it leaked, so the whole grant (every token of its family)
 * is revoked. The registry (one Durable Object, calls one at a time) holds the hashes of each
 * grant's current and earlier refresh tokens:
 * 0. a code or refresh token of a grant revoked in the last day is invalid_grant before the
 *    library runs (a KV read elsewhere may still show the grant, and a refresh there would write
 *    it back);
 * 1. a refresh with one of the grant's earlier tokens revokes the grant: invalid_grant (a token
 *    it never issued revokes nothing: the library refuses it);
 * 2. the current one is consumed before the library runs (two parallel uses: the second is reuse);
 * 3. the refresh token the library answers becomes the grant's current one; should the library
 *    refuse the refresh (a wrong client_id, another resource), nothing rotated and the presented
 *    token is current again;
 * 4. a refresh that was revoked while the library ran (a parallel reuse of the same token) is
 *    revoked again once the library has written its new tokens, and answered invalid_grant: the
 *    mark comes first in revokeGrantEverywhere, so in every interleaving either the revoke's KV
 *    deletes come after the refresh's writes or this second revoke does.
 * Authorization codes work once too. The library revokes the grant when a used code comes again,
 * but only in its KV; here the registry claims each code before the library runs, so a second
 * presentation (after the first exchange, or in parallel with it) revokes the grant everywhere
 * (grant.list stops showing it at once) and answers invalid_grant. A failed exchange releases the
 * claim; should the library have revoked the grant anyway (a code used before the registry
 * claimed codes) or a revocation request (RFC 7009) have revoked it, the grant goes everywhere
 * once the library's KV no longer has it.
 */
export async function tokenEndpoint(
  request: Request,
  env: Env,
  ctx: ExecutionContext,
  provider: OAuthProvider<Env>,
): Promise<Response> {
  const form = await request.clone().formData().catch(() => null);
  const presented = form?.get("grant_type") === "refresh_token" ? form.get("refresh_token") : null;
  const code = form?.get("grant_type") === "authorization_code" ? form.get("code") : null;
  const codeGrant = typeof code === "string" ? grantOf(code) : null;
  if (codeGrant !== null && (await registry(env).grantRevoked(codeGrant.grantId))) return revokedGrantAnswer();
  const codeHash = typeof code === "string" && codeGrant !== null ? await sha256Hex(code) : null;
  let codeClaimed = false;
  if (codeGrant !== null && codeHash !== null) {
    const claim = await registry(env).claimAuthorizationCode(codeGrant.grantId, codeHash);
    if (claim === "replayed") {
      await revokeGrantEverywhere(env, codeGrant.userId, codeGrant.grantId);
      return Response.json(
        { error: "invalid_grant", error_description: "authorization code already used: the grant is revoked, authorize again" },
        { status: 400, headers: { "Cache-Control": "no-store" } },
      );
    }
    codeClaimed = claim === "claimed";
  }
  let consumed: { grantId: string; tokenHash: string } | null = null;
  if (typeof presented === "string") {
    const grant = grantOf(presented);
    if (grant !== null) {
      const tokenHash = await sha256Hex(presented);
      const verdict = await registry(env).consumeRefreshToken(grant.grantId, tokenHash);
      if (verdict === "revoked") return revokedGrantAnswer();
      if (verdict === "current") consumed = { grantId: grant.grantId, tokenHash };
      if (verdict === "reused") {
        await revokeGrantEverywhere(env, grant.userId, grant.grantId);
        return Response.json(
          { error: "invalid_grant", error_description: "refresh token already used: the grant is revoked, authorize again" },
          { status: 400, headers: { "Cache-Control": "no-store" } },
        );
      }
    }
  }
  const response = await provider.fetch(request, env, ctx);
  if (codeGrant !== null && codeHash !== null) {
    if (response.ok) {
      await registry(env).recordAuthorizationCode(codeGrant.grantId, codeHash);
    } else {
      if (codeClaimed) await registry(env).releaseAuthorizationCode(codeGrant.grantId, codeHash);
      await forgetIfLibraryRevoked(env, codeGrant);
    }
  }
  const revoked = form !== null && !form.get("grant_type") ? form.get("token") : null;
  const revokedGrant = typeof revoked === "string" ? grantOf(revoked) : null;
  if (response.ok && revokedGrant !== null) await forgetIfLibraryRevoked(env, revokedGrant);
  if (!response.ok && consumed !== null) {
    await registry(env).restoreRefreshToken(consumed.grantId, consumed.tokenHash);
  }
  if (response.ok && consumed !== null && (await registry(env).grantRevoked(consumed.grantId))) {
    const grant = grantOf(presented as string);
    if (grant !== null) await revokeGrantEverywhere(env, grant.userId, grant.grantId);
    return revokedGrantAnswer();
  }
  if (response.ok) {
    const body: unknown = await response.clone().json().catch(() => null);
    const issued = typeof body === "object" && body !== null ? (body as Record<string, unknown>)["refresh_token"] : undefined;
    const grant = typeof issued === "string" ? grantOf(issued) : null;
    if (typeof issued === "string" && grant !== null) {
      await registry(env).recordRefreshToken(grant.grantId, await sha256Hex(issued), REFRESH_TOKEN_IDLE_TTL_S);
    }
  }
  return response;
}

/** A recorded grant the library revoked on its own (its KV record is gone) is revoked everywhere,
 * so grant.list and the relay agree with the library. */
async function forgetIfLibraryRevoked(env: Env, grant: { userId: string; grantId: string }): Promise<void> {
  if ((await registry(env).grantRecord(grant.userId, grant.grantId)) === null) return;
  if ((await env.OAUTH_KV.get(`grant:${grant.userId}:${grant.grantId}`)) !== null) return;
  await revokeGrantEverywhere(env, grant.userId, grant.grantId);
}

function revokedGrantAnswer(): Response {
  return Response.json(
    { error: "invalid_grant", error_description: "the grant was revoked on the workstation: authorize again" },
    { status: 400, headers: { "Cache-Control": "no-store" } },
  );
}

/** The 401 the library answers for a token that is no longer valid, for one the Edge knows is
 * revoked before KV does everywhere (RFC 6750 `invalid_token`, RFC 9728 resource metadata). */
export function revokedTokenResponse(request: Request): Response {
  const metadata = `${originOf(request)}/.well-known/oauth-protected-resource/mcp`;
  return Response.json(
    { error: "invalid_token", error_description: "the grant was revoked on the workstation" },
    {
      status: 401,
      headers: {
        "Cache-Control": "no-store",
        "WWW-Authenticate": `Bearer realm="OAuth", resource_metadata="${metadata}", error="invalid_token", error_description="the grant was revoked on the workstation"`,
      },
    },
  );
}
