/**
 * Connector consent: our authorize endpoint, its page and the page's status poll.
 *
 * The flow: `GET /authorize` (the library parses and validates the request: client, redirect URI,
 * PKCE S256, resource) stores a pending consent in the registry and shows a page with a short code
 * and the request id; the owner runs `herdr-mcp connector approve <request-id>` on a paired
 * workstation (the same code shown there), which reaches the owner's control methods
 * (src/control.ts): the approval completes the authorization with the library (a grant for that
 * device, recorded in the registry in the same step); the page, polling `POST /authorize/status`
 * with its poll token, then sends the browser to the client's redirect URI.
 */

import { AuthorizationError, type AuthRequest, CimdFetchError, type ConsentDescription } from "@cloudflare/workers-oauth-provider";
import type { Env } from "./env.js";
import { errorResponse, escapeHtml, jsonResponse, randomFromAlphabet, randomToken, readJsonObject, sha256Hex } from "./http.js";
import { oauthHelpers, originOf } from "./oauth.js";
import { METADATA_URL_REFUSED, outboundRefusal, REFUSED_FETCH_PREFIX } from "./outbound.js";
import { CONSENT_TTL_S, type ConsentRecord, registry } from "./registry.js";

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
