/**
 * The frames of the link <-> Edge protocol, version 1 (docs/edge-protocol.md): limits and the one
 * parse boundary for what the link sends. A frame that parses is well-formed; a known type with
 * missing or wrongly typed fields is a `FrameError` (the caller closes with 1008).
 */

import type { DeliveryState, RuntimeIdentity } from "../relay_stub.js";

export const PROTOCOL_VERSION = 1;
/** docs/edge-protocol.md: at most 256 KiB of UTF-8 per frame, both directions. */
export const MAX_FRAME_BYTES = 262_144;
/** docs/edge-protocol.md: a chunked result is reassembled up to 16 MiB. */
export const MAX_RESULT_BYTES = 16 * 1024 * 1024;
/** The default interval and silence limit of docs/edge-protocol.md (tests shorten them by vars). */
export const HEARTBEAT_S = 30;
export const SILENCE_LIMIT_S = 90;

/** WebSocket close codes (RFC 6455 section 7.4.1, 1012 from the IANA registry). */
export const CLOSE_GOING_AWAY = 1001;
export const CLOSE_UNSUPPORTED_DATA = 1003;
export const CLOSE_POLICY_VIOLATION = 1008;
export const CLOSE_TOO_BIG = 1009;
export const CLOSE_SERVICE_RESTART = 1012;

const DELIVERY_STATES: readonly string[] = ["not_delivered", "delivery_unknown", "delivered"];
/** "Sent, answer lost" was `delivery_uncertain` in the runtime until the three planes took one
 * name, `delivery_unknown`. The planes deploy apart, so for a transition a link may still say the
 * former name, as a delivery state or as a tool_error's code: it is read as `delivery_unknown`,
 * and the Edge itself writes only `delivery_unknown` (docs/edge-protocol.md, "Delivery"). */
const FORMER_DELIVERY_UNKNOWN = "delivery_uncertain";

export type LinkFrame =
  | { type: "hello"; device_id: string; link_version: string; runtime: RuntimeIdentity }
  | { type: "heartbeat"; seq: number; runtime: RuntimeIdentity }
  | { type: "tool_result"; id: string; result: { [key: string]: unknown } }
  | { type: "tool_result_chunk"; id: string; index: number; count: number; data: string }
  | { type: "tool_error"; id: string; code: string; message: string; retryable: boolean; delivery_state: DeliveryState }
  | { type: "cancel_ack"; id: string; delivery_state: DeliveryState }
  | { type: "control_request"; id: string; method: string; params: { [key: string]: unknown } }
  | { type: "unknown" };

/** The longest identity string (device id, versions, generation, hash) a frame may carry: they are
 * kept in the socket's attachment, which the Hibernation API caps at 2,048 bytes in all. */
export const MAX_IDENTITY_CHARS = 128;

/** A known frame type with missing or wrongly typed fields, or text that is not a JSON object. */
export class FrameError extends Error {}

/** The UTF-8 length of `text`, measured only when it could exceed `limit`. */
export function exceedsBytes(text: string, limit: number): boolean {
  if (text.length > limit) return true;
  if (text.length * 3 <= limit) return false;
  return new TextEncoder().encode(text).byteLength > limit;
}

/** Parse one text frame from the link. Raises FrameError. */
export function parseLinkFrame(text: string): LinkFrame {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new FrameError("a frame is one JSON object");
  }
  const frame = object(value, "frame");
  switch (frame["type"]) {
    case "hello":
      if (frame["protocol"] !== PROTOCOL_VERSION) throw new FrameError(`protocol must be ${PROTOCOL_VERSION}`);
      return {
        type: "hello",
        device_id: short(frame["device_id"], "device_id"),
        link_version: short(frame["link_version"], "link_version"),
        runtime: runtime(frame["runtime"]),
      };
    case "heartbeat":
      return { type: "heartbeat", seq: counter(frame["seq"], "seq", 1), runtime: runtime(frame["runtime"]) };
    case "tool_result":
      return { type: "tool_result", id: string(frame["id"], "id"), result: object(frame["result"], "result") };
    case "tool_result_chunk": {
      const count = counter(frame["count"], "count", 1);
      const index = counter(frame["index"], "index", 0);
      if (index >= count) throw new FrameError("index must be below count");
      return { type: "tool_result_chunk", id: string(frame["id"], "id"), index, count, data: string(frame["data"], "data") };
    }
    case "tool_error":
      if (typeof frame["retryable"] !== "boolean") throw new FrameError("retryable must be a boolean");
      return {
        type: "tool_error",
        id: string(frame["id"], "id"),
        code: currentCode(string(frame["code"], "code")),
        message: string(frame["message"], "message"),
        retryable: frame["retryable"],
        delivery_state: deliveryState(frame["delivery_state"]),
      };
    case "cancel_ack":
      return { type: "cancel_ack", id: string(frame["id"], "id"), delivery_state: deliveryState(frame["delivery_state"]) };
    case "control_request":
      return {
        type: "control_request",
        id: string(frame["id"], "id"),
        method: string(frame["method"], "method"),
        params: object(frame["params"], "params"),
      };
    default:
      if (typeof frame["type"] !== "string") throw new FrameError("type must be a string");
      // Unknown types are ignored (room for later additive frames), and so are the Edge's own
      // types echoed back: they carry nothing the Edge acts on.
      return { type: "unknown" };
  }
}

function object(value: unknown, name: string): { [key: string]: unknown } {
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new FrameError(`${name} must be an object`);
  return value as { [key: string]: unknown };
}

function string(value: unknown, name: string): string {
  if (typeof value !== "string") throw new FrameError(`${name} must be a string`);
  return value;
}

function short(value: unknown, name: string): string {
  const text = string(value, name);
  if (text.length > MAX_IDENTITY_CHARS) throw new FrameError(`${name} is longer than ${MAX_IDENTITY_CHARS} characters`);
  return text;
}

function counter(value: unknown, name: string, minimum: number): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < minimum) {
    throw new FrameError(`${name} must be an integer >= ${minimum}`);
  }
  return value;
}

function deliveryState(value: unknown): DeliveryState {
  if (value === FORMER_DELIVERY_UNKNOWN) return "delivery_unknown";
  if (typeof value !== "string" || !DELIVERY_STATES.includes(value)) {
    throw new FrameError(`delivery_state must be one of ${DELIVERY_STATES.join(", ")}`);
  }
  return value as DeliveryState;
}

/** A tool_error's code, the former name of "sent, answer lost" read as today's. */
function currentCode(code: string): string {
  return code === FORMER_DELIVERY_UNKNOWN ? "delivery_unknown" : code;
}

function runtime(value: unknown): RuntimeIdentity {
  const fields = object(value, "runtime");
  const contract = object(fields["contract"], "runtime.contract");
  return {
    generation: fields["generation"] === null ? null : short(fields["generation"], "runtime.generation"),
    version: short(fields["version"], "runtime.version"),
    contract: {
      epoch: contract["epoch"] === null ? null : counter(contract["epoch"], "runtime.contract.epoch", 0),
      hash: short(contract["hash"], "runtime.contract.hash"),
      tool_count:
        contract["tool_count"] === null ? null : counter(contract["tool_count"], "runtime.contract.tool_count", 0),
    },
  };
}
