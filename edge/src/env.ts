/**
 * The Worker's bindings, secrets and variables (wrangler.jsonc, `wrangler secret put`). Types
 * only, importing nothing: every module may import it. The two Durable Object bindings are
 * declared untyped; each has one accessor that types its stub (registry() in src/registry.ts,
 * relayOf() in src/relay_stub.ts).
 */

export interface Env {
  /** The OAuth library's clients, grants and tokens. */
  OAUTH_KV: KVNamespace;
  /** One Durable Object per paired device (edge/src/relay/), named by its device id. */
  DEVICE_RELAY: DurableObjectNamespace;
  /** The one registry of pairings, devices and pending consents (src/registry.ts). */
  EDGE_REGISTRY: DurableObjectNamespace;
  /** Protects GET /pair (a Worker secret). */
  ADMIN_SECRET: string;
  /** The key of the device-secret verifiers (a Worker secret; changing it unpairs every device). */
  EDGE_HMAC_KEY: string;
  /** Per-client-IP limits of the open endpoints (wrangler.jsonc `ratelimits`; src/rate_limit.ts). */
  RATE_LIMIT: RateLimit;
  /** Wrong pairing codes allowed across all pairings per window (default 20; for tests). */
  PAIRING_WRONG_CODES_MAX?: string;
  /** That window in seconds (default 3600; for tests). */
  PAIRING_WRONG_CODES_WINDOW_S?: string;
  /** Test configuration only: "1" enables the /__test/ routes (never set in wrangler.jsonc). */
  EDGE_TEST_ROUTES?: string;
  /** Test configuration only, honoured with EDGE_TEST_ROUTES=1: comma-separated origins of the
   * tests' loopback client metadata document servers, fetched although loopback (src/outbound.ts;
   * never set in wrangler.jsonc). */
  EDGE_TEST_CIMD_ORIGINS?: string;
}
