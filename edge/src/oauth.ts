/**
 * OAuth 2.1 for MCP connectors, on @cloudflare/workers-oauth-provider: the library serves RFC 8414
 * metadata, RFC 9728 protected-resource metadata for /mcp (and the 401 challenge pointing at it),
 * dynamic client registration, client ID metadata documents, the token endpoint (authorization
 * code with PKCE S256 only: the library refuses `plain` and has no option to allow it), audience
 * binding of every token to the /mcp resource, and token validation for /mcp. Ours: the authorize
 * page (src/consent.ts), strict refresh-token rotation (src/token.ts) and the grants' records
 * (src/grants.ts). This module holds the library's options; the handlers it routes to are given
 * by the Worker's entry (src/index.ts), so nothing here imports the routes.
 */

import { OAuthProvider, getOAuthApi, type OAuthHelpers, type OAuthProviderOptions } from "@cloudflare/workers-oauth-provider";
import type { Env } from "./env.js";

/** One hour: a stolen access token is short-lived; the refresh token renews it. */
const ACCESS_TOKEN_TTL_S = 3600;
/** Thirty days of no use ends a connector (each refresh moves the end). */
export const REFRESH_TOKEN_IDLE_TTL_S = 30 * 24 * 3600;

/** A handler of requests the library routes. */
export interface FetchHandler {
  fetch(request: Request, env: Env, ctx: ExecutionContext): Promise<Response>;
}

/** What the library routes to: /mcp once its token is checked (`api`), and every request that is
 * none of its own (`fallback`). */
export interface RoutedHandlers {
  api: FetchHandler;
  fallback: FetchHandler;
}

/** The provider's options for the Edge served at `origin` (scheme://host[:port]). The resource is
 * `<origin>/mcp`: a token minted for one origin is refused at another. */
function oauthOptions(origin: string, handlers: RoutedHandlers): OAuthProviderOptions<Env> {
  return {
    apiRoute: "/mcp",
    apiHandler: handlers.api,
    defaultHandler: handlers.fallback,
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

/** The provider for `origin`, built once per isolate (its options are fixed per origin; the
 * handlers are the same for every origin). */
export function providerFor(origin: string, handlers: RoutedHandlers): OAuthProvider<Env> {
  let provider = providers.get(origin);
  if (provider === undefined) {
    // The origin comes from the Host header; a flood of made-up hosts must not grow this forever.
    if (providers.size >= MAX_CACHED_ORIGINS) providers.clear();
    provider = new OAuthProvider<Env>(oauthOptions(origin, handlers));
    providers.set(origin, provider);
  }
  return provider;
}

/** Stands in for the handlers in the helpers' options: the helpers route no request. */
const UNROUTED: FetchHandler = { fetch: async () => new Response(null, { status: 404 }) };

/** The library's helpers outside a request it routed (the registry, the control methods): the
 * provider's options at `origin`, the handlers never called through them. */
export function oauthHelpers(origin: string, env: Env): OAuthHelpers {
  return getOAuthApi(oauthOptions(origin, { api: UNROUTED, fallback: UNROUTED }), env);
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
