/**
 * The device's relay as the rest of the Edge sees it: the types of what its calls answer (the
 * delivery states, the runtime identity a link announces, the outcome of a call, a device's
 * status) and its stub. The relay itself (src/relay/: the Durable Object, which implements
 * `RelayStub`, and the routes on it) imports this module; a module that only calls the relay
 * imports this one, never src/relay/.
 */

import type { Env } from "./env.js";

/**
 * Whether a relayed call reached the runtime (docs/edge-protocol.md, "Delivery"): not at all, it
 * may have (sent, answer lost: re-inspect before repeating it), or it did. The Edge writes these
 * three only; src/relay/frames.ts also reads the runtime's former name of the middle one.
 */
export type DeliveryState = "not_delivered" | "delivery_unknown" | "delivered";

/** A contract as a link announces it: the epoch or tool count may be unknown to the link (null) for a
 * runtime whose hash matches no catalog it knows; the Edge then refuses calls contract_mismatch. */
export interface AnnouncedContract {
  epoch: number | null;
  hash: string;
  tool_count: number | null;
}

/** The runtime a link announces (hello, each heartbeat). */
export interface RuntimeIdentity {
  generation: string | null;
  version: string;
  contract: AnnouncedContract;
}

/** An Edge-side failure of a relayed call, shaped like the runtime's tool errors plus delivery. */
export interface RelayError {
  code: string;
  message: string;
  retryable: boolean;
  delivery_state: DeliveryState;
}

export type CallOutcome = { result: Record<string, unknown> } | { error: RelayError };

/** What herdr_devices and /status/<device> show: no secrets. */
export interface DeviceStatus {
  device_id: string | null;
  online: boolean;
  connected_at: string | null;
  disconnected_at: string | null;
  last_heartbeat_at: string | null;
  link_version: string | null;
  runtime: RuntimeIdentity | null;
  /** Whether the runtime's contract is the one edge epoch 8 is built from: only then are calls
   * relayed (docs/edge-protocol.md, "The runtime identity and the public contract"). */
  contract_compatible: boolean;
}

/** The methods of the relay object the Worker calls (RPC, and `fetch` for the link's upgrade).
 * Their values are plain JSON data, which RPC passes by structured clone unchanged; declared here
 * because workers-types' derived stub type of the recursive JSON catalog types is too deep for tsc. */
export interface RelayStub {
  /** The link's authenticated `GET /link/connect` upgrade (src/pairing.ts forwards it). */
  fetch(request: Request): Promise<Response>;
  /** Relay one tool call; `cancelKey` names it for a later cancel, `grantId` is the caller's grant. */
  call(tool: string, args: Record<string, unknown>, cancelKey: string | null, grantId: string | null): Promise<CallOutcome>;
  /** Cancel the pending call known by `cancelKey`; false when there is none. */
  cancel(cancelKey: string): Promise<boolean>;
  /** Whether `grantId` was revoked here lately (its tokens may still pass a KV read). */
  grantRevoked(grantId: string): Promise<boolean>;
  /** Refuse `grantId`'s calls from now on. */
  revokeGrant(grantId: string): Promise<void>;
  status(): Promise<DeviceStatus>;
}

/** The device's relay object, named by its device id. */
export function relayOf(env: Env, deviceId: string): RelayStub {
  return env.DEVICE_RELAY.get(env.DEVICE_RELAY.idFromName(deviceId)) as unknown as RelayStub;
}
