/** `GET /status/<device>`: a paired device's link state, public and free of secrets. */

import type { Env } from "../env.js";
import { errorResponse, jsonResponse } from "../http.js";
import { registry } from "../registry.js";
import { relayOf } from "./mcp.js";

/** The status of `deviceId`, or 404 `device_not_found` when no such device is paired. */
export async function statusResponse(env: Env, deviceId: string): Promise<Response> {
  const device = (await registry(env).listDevices()).find((candidate) => candidate.device_id === deviceId);
  if (device === undefined) {
    return errorResponse(404, "device_not_found", "no device with that id is paired with this Edge; check the id `herdr-mcp link status` shows");
  }
  const status = await relayOf(env, deviceId).status();
  return jsonResponse({ ...status, device_id: device.device_id, name: device.name, paired_at: new Date(device.paired_at * 1000).toISOString() });
}
