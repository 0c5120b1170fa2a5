/**
 * `GET /status/<device>`: a paired device's link state, free of secrets, for that device's own
 * credential (`Authorization: Device <id>.<secret>`, as /link/connect checks) or the owner's
 * ADMIN_SECRET (as /pair checks). Anyone else hears 401 `status_unauthorized`, the same for a
 * device that exists and one that does not (an access token starts with the device id, so the id
 * is no secret).
 */

import type { Env } from "../env.js";
import { decodePathSegment, errorResponse, jsonResponse } from "../http.js";
import { authenticatedDevice, isAdmin } from "../pairing.js";
import { registry } from "../registry.js";
import { relayOf } from "../relay_stub.js";

/** The status of the device the path segment `segment` names (percent-encoded). */
export async function statusResponse(request: Request, env: Env, segment: string): Promise<Response> {
  const deviceId = decodePathSegment(segment);
  if (deviceId === null) {
    return errorResponse(400, "invalid_path", "the device id in the path is not valid percent-encoding (UTF-8)");
  }
  if (!(await isAdmin(request, env)) && (await authenticatedDevice(request, env)) !== deviceId) {
    return errorResponse(
      401,
      "status_unauthorized",
      "send the device's own credential (Authorization: Device <id>.<secret>, as `herdr-mcp link` does) or the ADMIN_SECRET as a Bearer token",
      { "WWW-Authenticate": 'Bearer realm="herdr-mcp edge status"' },
    );
  }
  const device = (await registry(env).listDevices()).find((candidate) => candidate.device_id === deviceId);
  if (device === undefined) {
    return errorResponse(404, "device_not_found", "no device with that id is paired with this Edge; check the id `herdr-mcp link status` shows");
  }
  const status = await relayOf(env, deviceId).status();
  return jsonResponse({ ...status, device_id: device.device_id, name: device.name, paired_at: new Date(device.paired_at * 1000).toISOString() });
}
