/** The relay: the Durable Object per device, /mcp and /status/<device> (edge/README.md, "The relay"). */

export { DeviceRelay } from "./device_relay.js";
export { mcpApiHandler, relayOf } from "./mcp.js";
export { statusResponse } from "./status.js";
