/**
 * The owner's control methods. They arrive from the workstation as `control_request` frames on
 * the link; the device's Durable Object calls
 *
 *     handleControl(env: Env, deviceId: string, method: string, params: Record<string, unknown>): Promise<ControlResult>
 *
 * and sends the answer back as `control_result` (`{result}` or `{error: {code, message}}`).
 * Methods (docs/edge-protocol.md): consent.list, consent.approve, consent.deny, grant.list,
 * grant.revoke. Approving a consent (one the authorize page of src/consent.ts stored) completes the
 * authorization with the library. grant.list and grant.revoke work from the registry's grant
 * records, never from a KV list (eventually consistent), except once per device for grants made
 * before records existed.
 */

import { type AuthRequest, CimdFetchError, type GrantSummary } from "@cloudflare/workers-oauth-provider";
import type { Env } from "./env.js";
import { type GrantProps, grantHelpers, revokeGrantEverywhere } from "./grants.js";
import { oauthHelpers } from "./oauth.js";
import { METADATA_URL_REFUSED, REFUSED_FETCH_PREFIX } from "./outbound.js";
import { GRANT_CODE_TTL_S, type GrantRecord, registry } from "./registry.js";

export type ControlResult =
  | { result: Record<string, unknown> }
  | { error: { code: string; message: string } };

/** Run one control method for the paired device `deviceId` (see the top of this file). */
export async function handleControl(
  env: Env,
  deviceId: string,
  method: string,
  params: Record<string, unknown>,
): Promise<ControlResult> {
  switch (method) {
    case "consent.list":
      return consentList(env);
    case "consent.approve":
      return consentDecide(env, deviceId, params, "approved");
    case "consent.deny":
      return consentDecide(env, deviceId, params, "denied");
    case "grant.list":
      return grantList(env, deviceId);
    case "grant.revoke":
      return grantRevoke(env, deviceId, params);
    default:
      return failure("method_not_found", `unknown control method ${JSON.stringify(method)}: see docs/edge-protocol.md`);
  }
}

function failure(code: string, message: string): ControlResult {
  return { error: { code, message } };
}

async function consentList(env: Env): Promise<ControlResult> {
  const pending = await registry(env).listPendingConsents();
  return {
    result: {
      pending: pending.map(({ request_id, code, client_name, redirect_uri, created_at }) => ({
        request_id,
        code,
        client_name,
        redirect_uri,
        created_at,
      })),
    },
  };
}

/**
 * Approve or deny a pending consent:
 * 1. it must exist (consent_not_found), be unexpired (consent_expired) and pending;
 * 2. approving completes the authorization with the library: a grant for this device (the
 *    library's own replacement of older grants, found by a KV list, is off: step 3 does it);
 * 3. the registry records the decision and the grant once, and names the device's older grants
 *    of the same client it replaces, which are revoked; should another call have decided the
 *    consent in between, the grant made here is revoked again.
 */
async function consentDecide(
  env: Env,
  deviceId: string,
  params: Record<string, unknown>,
  state: "approved" | "denied",
): Promise<ControlResult> {
  const requestId = params["request_id"];
  if (typeof requestId !== "string") return failure("invalid_argument", "params.request_id must be a string");
  const found = await registry(env).getConsent(requestId);
  if (found === null) {
    return failure("consent_not_found", `no consent ${requestId}: check the request id the page shows (or consent.list)`);
  }
  const consent = found.consent;
  if (found.expired) {
    return failure("consent_expired", `consent ${requestId} expired: connect the client again for a new one`);
  }
  if (consent.state !== "pending") {
    return failure("consent_not_found", `consent ${requestId} was already ${consent.state}`);
  }
  const authRequest = JSON.parse(consent.auth_request_json) as AuthRequest;
  const helpers = oauthHelpers(new URL(authRequest.resource ?? authRequest.redirectUri).origin, env);
  let redirectTo: string;
  let grant: GrantRecord | undefined;
  if (state === "approved") {
    // Grants made before records existed must be known before this one replaces any of them.
    await grantsOf(env, deviceId);
    const props: GrantProps = { device_id: deviceId, request_id: requestId, client_name: consent.client_name };
    try {
      ({ redirectTo } = await helpers.completeAuthorization({
        request: authRequest,
        userId: deviceId,
        metadata: { client_name: consent.client_name, request_id: requestId },
        scope: authRequest.scope,
        props,
        revokeExistingGrants: false,
      }));
    } catch (error) {
      // A client ID metadata document is fetched again here; the client may have gone meanwhile.
      if (error instanceof CimdFetchError) {
        if (error.detail.startsWith(REFUSED_FETCH_PREFIX)) {
          return failure(METADATA_URL_REFUSED, `the client's metadata document URL is not fetched: ${error.detail.slice(REFUSED_FETCH_PREFIX.length)}`);
        }
        return failure("client_unavailable", "the client's metadata document could not be fetched: connect it again");
      }
      throw error;
    }
    // The library's codes are `<user id>:<grant id>:<secret>`: the grant id is the middle part.
    const grantId = new URL(redirectTo).searchParams.get("code")?.split(":")[1];
    if (!grantId) throw new Error("the OAuth library answered a redirect without an authorization code");
    const now = await registry(env).now();
    grant = {
      grant_id: grantId,
      device_id: deviceId,
      client_id: authRequest.clientId,
      client_name: consent.client_name,
      scope: authRequest.scope,
      resource: authRequest.resource ?? null,
      redirect_uri: authRequest.redirectUri,
      created_at: now,
      expires_at: now + GRANT_CODE_TTL_S,
      source: "approval",
    };
  } else {
    const denied = new URL(authRequest.redirectUri);
    denied.searchParams.set("error", "access_denied");
    denied.searchParams.set("error_description", "the owner denied this connector on the workstation");
    if (authRequest.state) denied.searchParams.set("state", authRequest.state);
    if (authRequest.issuer) denied.searchParams.set("iss", authRequest.issuer);
    redirectTo = denied.toString();
  }
  const outcome = await registry(env).decideConsent(
    requestId,
    { state, device_id: deviceId, redirect_to: redirectTo, ...(grant === undefined ? {} : { grant_id: grant.grant_id }) },
    grant,
  );
  if (outcome === null || !outcome.decided) {
    if (grant !== undefined) await revokeGrantEverywhere(env, deviceId, grant.grant_id);
    return failure("consent_not_found", `consent ${requestId} was decided by another call`);
  }
  for (const replaced of outcome.replaced) await revokeGrantEverywhere(env, deviceId, replaced);
  return grant !== undefined
    ? { result: { request_id: requestId, code: consent.code, client_name: consent.client_name, grant_id: grant.grant_id } }
    : { result: { request_id: requestId } };
}

/** The grants this device approved (the registry's records; a grant belongs to the device). */
async function grantList(env: Env, deviceId: string): Promise<ControlResult> {
  const grants = await grantsOf(env, deviceId);
  const uses = await registry(env).grantUses(grants.map((grant) => grant.grant_id));
  return {
    result: {
      grants: grants.map((grant) => ({
        grant_id: grant.grant_id,
        client_id: grant.client_id,
        client_name: grant.client_name,
        scope: grant.scope,
        created_at: grant.created_at,
        // Recorded by /mcp at most once a minute (src/grants.ts); null before the first call.
        last_used_at: uses[grant.grant_id] ?? null,
      })),
    },
  };
}

async function grantRevoke(env: Env, deviceId: string, params: Record<string, unknown>): Promise<ControlResult> {
  const grantId = params["grant_id"];
  if (typeof grantId !== "string") return failure("invalid_argument", "params.grant_id must be a string");
  await grantsOf(env, deviceId);
  if ((await registry(env).grantRecord(deviceId, grantId)) === null) {
    return failure("grant_not_found", `no grant ${grantId} for this device (list them with grant.list)`);
  }
  await revokeGrantEverywhere(env, deviceId, grantId);
  return { result: { grant_id: grantId, revoked: true } };
}

/**
 * The device's grants, from the registry. Grants made before the registry recorded them (an Edge
 * deployed before this) exist only in the library's KV: until a KV list surely holds all of them
 * (registry.legacyGrantsPending), each call reads the device's KV list and imports what it has
 * not seen or seen revoked; after that no KV list is read again for the device.
 */
async function grantsOf(env: Env, deviceId: string): Promise<GrantRecord[]> {
  const records = registry(env);
  if (await records.legacyGrantsPending(deviceId)) {
    const listedAt = await records.now();
    const listed = await libraryGrants(env, deviceId);
    await records.importLegacyGrants(deviceId, listed.map(grantRecordOf), listedAt);
  }
  return records.listGrantRecords(deviceId);
}

async function libraryGrants(env: Env, deviceId: string): Promise<GrantSummary[]> {
  const helpers = grantHelpers(env);
  const grants: GrantSummary[] = [];
  let cursor: string | undefined;
  do {
    const page = await helpers.listUserGrants(deviceId, cursor === undefined ? {} : { cursor });
    grants.push(...page.items);
    cursor = page.cursor;
  } while (cursor);
  return grants;
}

/** A grant the library listed, as a registry record (source "kv"). */
function grantRecordOf(grant: GrantSummary): GrantRecord {
  const resource = grant.resource;
  return {
    grant_id: grant.id,
    device_id: grant.userId,
    client_id: grant.clientId,
    client_name: (grant.metadata as { client_name?: string } | undefined)?.client_name ?? grant.clientId,
    scope: grant.scope,
    resource: resource === undefined ? null : typeof resource === "string" ? resource : JSON.stringify(resource),
    redirect_uri: grant.redirectUri ?? "",
    created_at: grant.createdAt,
    expires_at: grant.expiresAt ?? grant.createdAt + GRANT_CODE_TTL_S,
    source: "kv",
  };
}
