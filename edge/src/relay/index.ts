/**
 * Placeholder until the relay lands (EDGE-RELAY replaces this file): a Durable Object per device
 * that refuses every link, and a /mcp handler that refuses every call, both 503 relay_unavailable.
 */

import { DurableObject } from "cloudflare:workers";
import type { Env } from "../env.js";
import { errorResponse } from "../http.js";

export class DeviceRelay extends DurableObject<Env> {
  override async fetch(_request: Request): Promise<Response> {
    return errorResponse(503, "relay_unavailable", "this Edge has no relay yet: deploy a build with edge/src/relay/");
  }
}

export const mcpApiHandler = {
  async fetch(_request: Request, _env: Env, _ctx: ExecutionContext): Promise<Response> {
    return errorResponse(503, "relay_unavailable", "this Edge has no relay yet: deploy a build with edge/src/relay/");
  },
};
