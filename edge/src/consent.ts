/**
 * Connector consent: our authorize endpoint and the owner's control methods.
 *
 * The control methods arrive from the workstation as `control_request` frames on the link; the
 * device's Durable Object calls
 *
 *     handleControl(env: Env, deviceId: string, method: string, params: Record<string, unknown>): Promise<ControlResult>
 *
 * and sends the answer back as `control_result` (`{result}` or `{error: {code, message}}`).
 * Methods (docs/edge-protocol.md): consent.list, consent.approve, consent.deny, grant.list,
 * grant.revoke.
 *
 * The flow: `GET /authorize` (the library parses and validates the request: client, redirect URI,
 * PKCE S256, resource) stores a pending consent in the registry and shows a page with a short code
 * and the request id; the owner runs `herdr-mcp connector approve <request-id>` on a paired
 * workstation (the same code shown there); the approval completes the authorization with the
 * library (a grant for that device, recorded in the registry in the same step); the page, polling
 * `POST /authorize/status` with its poll token, then sends the browser to the client's redirect
 * URI. grant.list and grant.revoke work from the registry's grant records, never from a KV list
 * (eventually consistent), except once per device for grants made before records existed.
 */

import { AuthorizationError, type AuthRequest, CimdFetchError, type ConsentDescription, type GrantSummary } from "@cloudflare/workers-oauth-provider";
import type { Env } from "./env.js";
import {
  errorResponse,
  escapeHtml,
  jsonResponse,
  randomFromAlphabet,
  randomToken,
  readJsonObject,
  sha256Hex,
} from "./http.js";
import { type GrantProps, grantHelpers, oauthHelpers, originOf, revokeGrantEverywhere } from "./oauth.js";
import { METADATA_URL_REFUSED, outboundRefusal, REFUSED_FETCH_PREFIX } from "./outbound.js";
import { CONSENT_TTL_S, type ConsentRecord, GRANT_CODE_TTL_S, type GrantRecord, registry } from "./registry.js";

export type ControlResult =
  | { result: Record<string, unknown> }
  | { error: { code: string; message: string } };

/** No 0/O, 1/I/L, 2/Z, 5/S, 8/B: read aloud or retyped without doubt. */
const CODE_ALPHABET = "ACDEFGHJKMNPQRTUVWXY34679";
const CODE_LENGTH = 6;
const STATUS_BODY_MAX_BYTES = 4096;

/** `GET /authorize`: validate the request, store the pending consent, show the page. */
export async function authorize(request: Request, env: Env): Promise<Response> {
  // A client_id with a scheme claims to be a client metadata document URL: one the Edge would not
  // fetch is refused here, before the library fetches anything (src/outbound.ts).
  const claimedUrl = new URL(request.url).searchParams.get("client_id");
  if (claimedUrl !== null && claimedUrl.includes(":")) {
    const refusal = outboundRefusal(claimedUrl);
    if (refusal !== null) return refusedDocumentPage(refusal);
  }
  const helpers = oauthHelpers(originOf(request), env);
  let authRequest: AuthRequest;
  let described: ConsentDescription;
  try {
    authRequest = await helpers.parseAuthRequest(request);
    described = await helpers.describeConsent(authRequest);
  } catch (error) {
    if (error instanceof AuthorizationError) {
      // Only a validated redirect URI may receive the error; anything else is shown here.
      if (error.redirectTo !== undefined) return Response.redirect(error.redirectTo, 302);
      return errorPage(400, error.code, error.description);
    }
    if (error instanceof CimdFetchError) {
      // A redirect to a host the Edge does not fetch was refused before it was followed.
      if (error.detail.startsWith(REFUSED_FETCH_PREFIX)) return refusedDocumentPage(error.detail.slice(REFUSED_FETCH_PREFIX.length));
      return errorPage(400, "invalid_client", "the client's metadata document (its https client_id) could not be fetched");
    }
    return errorPage(400, "invalid_request", error instanceof Error ? error.message : "invalid authorization request");
  }
  // A client ID metadata document's domain is the one name here the client cannot just claim.
  const clientName = described.clientDomain === undefined ? described.clientName : `${described.clientName} (${described.clientDomain})`;
  const now = await registry(env).now();
  const pollToken = randomToken(32);
  const consent: ConsentRecord = {
    request_id: `req_${randomToken(12)}`,
    code: randomFromAlphabet(CODE_ALPHABET, CODE_LENGTH),
    poll_verifier: await sha256Hex(pollToken),
    client_id: authRequest.clientId,
    client_name: clientName,
    redirect_uri: authRequest.redirectUri,
    created_at: now,
    expires_at: now + CONSENT_TTL_S,
    state: "pending",
    auth_request_json: JSON.stringify(authRequest),
  };
  await registry(env).putConsent(consent);
  return new Response(consentPage(consent, pollToken), {
    headers: {
      "Content-Type": "text/html; charset=utf-8",
      "Cache-Control": "no-store",
      "X-Frame-Options": "DENY",
      "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'",
      "Referrer-Policy": "no-referrer",
    },
  });
}

/** `POST /authorize/status` `{request_id, poll_token}`: pending, or decided with where to go. */
export async function consentStatus(request: Request, env: Env): Promise<Response> {
  const body = await readJsonObject(request, STATUS_BODY_MAX_BYTES);
  const requestId = body?.["request_id"];
  const pollToken = body?.["poll_token"];
  if (typeof requestId !== "string" || typeof pollToken !== "string") {
    return errorResponse(400, "invalid_argument", 'send {"request_id": "...", "poll_token": "..."} from the consent page');
  }
  const found = await registry(env).getConsent(requestId);
  if (found === null || found.consent.poll_verifier !== (await sha256Hex(pollToken))) {
    return errorResponse(404, "consent_not_found", "this consent request is unknown: start the connection again");
  }
  const { consent, expired } = found;
  if (expired) {
    return errorResponse(410, "consent_expired", "this consent request expired: start the connection again");
  }
  if (consent.state === "pending") return jsonResponse({ status: "pending", expires_at: consent.expires_at });
  return jsonResponse({ status: consent.state, redirect_to: consent.redirect_to });
}

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
        // Recorded by /mcp at most once a minute (src/oauth.ts); null before the first call.
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

function refusedDocumentPage(reason: string): Response {
  return errorPage(
    400,
    METADATA_URL_REFUSED,
    `the client_id names a client metadata document the Edge does not fetch: ${reason}. Nothing was fetched.`,
  );
}

function errorPage(status: number, code: string, message: string): Response {
  return new Response(
    `<!doctype html><html><head><meta charset="utf-8"><title>Authorization refused</title></head><body><h1>Authorization refused</h1><p><code>${escapeHtml(code)}</code>: ${escapeHtml(message)}</p></body></html>`,
    { status, headers: { "Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store", "X-Error-Code": code } },
  );
}

function consentPage(consent: ConsentRecord, pollToken: string): string {
  const boot = JSON.stringify({ request_id: consent.request_id, poll_token: pollToken }).replace(/</g, "\\u003c");
  return `<!doctype html><html><head><meta charset="utf-8"><title>Approve a connector</title></head>
<body style="font-family: system-ui; max-width: 40em; margin: 3em auto">
<h1>Approve this connector on your workstation</h1>
<p><strong>${escapeHtml(consent.client_name)}</strong> asks to use your herdr-mcp workstation; it will be sent to
<code>${escapeHtml(new URL(consent.redirect_uri).host || consent.redirect_uri)}</code>.</p>
<p>Code: <strong id="code" style="font-size: 2em; letter-spacing: 0.2em">${escapeHtml(consent.code)}</strong></p>
<p>On the workstation run <code>herdr-mcp connector approve <span id="request-id">${escapeHtml(consent.request_id)}</span></code>
and type the code above when it asks (or pass it as <code>--code</code>). Approve only a request you started yourself.
This page continues by itself once you approved.</p>
<p id="status">Waiting for approval...</p>
<script>
const boot = ${boot};
async function poll() {
  try {
    const response = await fetch("/authorize/status", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(boot) });
    const body = await response.json();
    if (body.redirect_to) { location.assign(body.redirect_to); return; }
    if (!response.ok) { document.getElementById("status").textContent = body.error.message; return; }
  } catch (error) {}
  setTimeout(poll, 2000);
}
poll();
</script>
</body></html>`;
}
