/**
 * The token endpoint: strict refresh-token rotation and single-use authorization codes in front
 * of the OAuth library's own /token (src/oauth.ts), from the registry's records of each grant.
 */

import type { OAuthProvider } from "@cloudflare/workers-oauth-provider";
import type { Env } from "./env.js";
import { grantOf, revokeGrantEverywhere } from "./grants.js";
import { sha256Hex } from "./http.js";
import { REFRESH_TOKEN_IDLE_TTL_S } from "./oauth.js";
import { registry } from "./registry.js";

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
