/**
 * The Durable Object per paired workstation (named by its device id): it holds the link's
 * WebSocket through the Hibernation API and relays tool calls over it (docs/edge-protocol.md).
 *
 * What must survive hibernation lives in the socket's attachment (per connection: hello seen,
 * last frame heard and sent, the announced runtime) and in storage (per device: last heartbeat,
 * the last runtime identity, connect and disconnect times). Pending calls live in memory only:
 * a call in flight is an open RPC from the Worker, which keeps the object awake until it settles.
 */

import { DurableObject } from "cloudflare:workers";
import { handleControl } from "../control.js";
import type { Env } from "../env.js";
import type { CallOutcome, DeliveryState, DeviceStatus, RelayError, RelayStub, RuntimeIdentity } from "../relay_stub.js";
import { contractCompatible, expectedRuntimeContract } from "./catalog.js";
import {
  CLOSE_GOING_AWAY,
  CLOSE_POLICY_VIOLATION,
  CLOSE_SERVICE_RESTART,
  CLOSE_TOO_BIG,
  CLOSE_UNSUPPORTED_DATA,
  exceedsBytes,
  FrameError,
  HEARTBEAT_S,
  type LinkFrame,
  MAX_FRAME_BYTES,
  MAX_RESULT_BYTES,
  PROTOCOL_VERSION,
  parseLinkFrame,
  SILENCE_LIMIT_S,
} from "./frames.js";


/** How long the Edge waits for a tool_result before it cancels the call (ms). */
export const DEFAULT_DEADLINE_MS = 120_000;
/** How long a cancel waits for the link's cancel_ack before the call is answered without it. */
const CANCEL_ACK_WAIT_MS = 10_000;

/** The relay's variables (all optional; tests shorten the timings). */
export interface RelayVars {
  RELAY_HEARTBEAT_S?: string;
  RELAY_SILENCE_LIMIT_S?: string;
  RELAY_DEADLINE_MS?: string;
}

interface Connection {
  device_id: string;
  connection_id: string;
  hello: boolean;
  connected_at: number;
  last_heard_at: number;
  last_sent_at: number;
  sent_seq: number;
  link_version: string | null;
  runtime: RuntimeIdentity | null;
}

interface DeviceRecord {
  device_id: string;
  /** The connection this record describes: a replaced one's late close must not overwrite it. */
  connection_id: string;
  connected_at: number | null;
  disconnected_at: number | null;
  last_heartbeat_at: number | null;
  link_version: string | null;
  runtime: RuntimeIdentity | null;
}

interface Pending {
  connection_id: string;
  /** The MCP caller's key for notifications/cancelled (null when it has none). */
  cancel_key: string | null;
  settle: (outcome: CallOutcome) => void;
  deadline: ReturnType<typeof setTimeout>;
  chunks: string[];
  chunk_count: number;
  chunk_bytes: number;
}

const DEVICE_KEY = "device";
const REVOKED_GRANT_PREFIX = "revoked-grant:";
/** A revoked grant's access tokens live at most an hour (src/oauth.ts), and a KV read elsewhere
 * may show a deleted one up to a minute: its id is kept two hours. */
const REVOKED_GRANT_RETAIN_MS = 2 * 3600 * 1000;

export class DeviceRelay extends DurableObject<Env & RelayVars> implements RelayStub {
  private readonly pending = new Map<string, Pending>();

  /** The link's authenticated `GET /link/connect` upgrade, forwarded by the Worker. */
  override async fetch(request: Request): Promise<Response> {
    const deviceId = request.headers.get("Herdr-Device-Id");
    if (request.headers.get("Upgrade")?.toLowerCase() !== "websocket" || !deviceId) {
      return Response.json(
        { error: { code: "upgrade_required", message: "connect with a WebSocket upgrade through /link/connect" } },
        { status: 426 },
      );
    }
    // A newer connection replaces the old one: its pending calls may have reached the runtime.
    for (const old of this.ctx.getWebSockets()) {
      this.dropConnection(old, CLOSE_SERVICE_RESTART, "replaced");
    }
    const pair = new WebSocketPair();
    const now = Date.now();
    const connection: Connection = {
      device_id: deviceId,
      connection_id: crypto.randomUUID(),
      hello: false,
      connected_at: now,
      last_heard_at: now,
      last_sent_at: now,
      sent_seq: 0,
      link_version: null,
      runtime: null,
    };
    this.ctx.acceptWebSocket(pair[1], [connection.connection_id]);
    pair[1].serializeAttachment(connection);
    await this.ctx.storage.setAlarm(now + this.heartbeatMs());
    return new Response(null, { status: 101, webSocket: pair[0] });
  }

  override async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer): Promise<void> {
    const connection = ws.deserializeAttachment() as Connection;
    if (typeof message !== "string") {
      this.dropConnection(ws, CLOSE_UNSUPPORTED_DATA, "frames are JSON text");
      return;
    }
    if (exceedsBytes(message, MAX_FRAME_BYTES)) {
      this.dropConnection(ws, CLOSE_TOO_BIG, `frame larger than ${MAX_FRAME_BYTES} bytes`);
      return;
    }
    let frame: LinkFrame;
    try {
      frame = parseLinkFrame(message);
    } catch (error) {
      if (!(error instanceof FrameError)) throw error;
      this.dropConnection(ws, CLOSE_POLICY_VIOLATION, error.message);
      return;
    }
    if (!connection.hello && frame.type !== "hello") {
      this.dropConnection(ws, CLOSE_POLICY_VIOLATION, "the first frame must be hello");
      return;
    }
    connection.last_heard_at = Date.now();
    await this.handleFrame(ws, connection, frame);
    if (ws.readyState === WebSocket.OPEN) ws.serializeAttachment(connection);
  }

  override async webSocketClose(ws: WebSocket, code: number, reason: string): Promise<void> {
    // 1005, 1006 and 1015 are reported, never sent (RFC 6455 section 7.4.1).
    this.dropConnection(ws, [1005, 1006, 1015].includes(code) ? 1000 : code, reason);
  }

  override async webSocketError(ws: WebSocket): Promise<void> {
    this.dropConnection(ws, 1011, "link error");
  }

  /** Heartbeats and the silence limit: the alarm runs while any connection is open. */
  override async alarm(): Promise<void> {
    const now = Date.now();
    const sockets = this.ctx.getWebSockets();
    for (const ws of sockets) {
      const connection = ws.deserializeAttachment() as Connection;
      if (now - connection.last_heard_at >= this.silenceMs()) {
        this.dropConnection(ws, CLOSE_GOING_AWAY, "silence limit reached");
      } else if (connection.hello && now - connection.last_sent_at >= this.heartbeatMs() - 1000) {
        this.sendHeartbeat(ws, connection);
        ws.serializeAttachment(connection);
      }
    }
    if (this.ctx.getWebSockets().length > 0) {
      await this.ctx.storage.setAlarm(Date.now() + Math.min(this.heartbeatMs(), this.silenceMs()));
    }
  }

  /** Relay one tool call to the link and wait for its answer (never re-sent by the Edge). A call
   * under a grant revoked here is refused `grant_revoked` (its token may still pass a KV read). */
  async call(tool: string, args: Record<string, unknown>, cancelKey: string | null, grantId: string | null): Promise<CallOutcome> {
    if (grantId !== null && (await this.grantRevoked(grantId))) {
      return relayError("grant_revoked", "this connector's grant was revoked on the workstation; connect it again", false, "not_delivered");
    }
    const found = this.currentConnection();
    if (!found) {
      return relayError("device_offline", "the workstation's link is not connected; start `herdr-mcp link` there", true, "not_delivered");
    }
    const [ws, connection] = found;
    if (!(await contractCompatible(connection.runtime?.contract))) return contractMismatch(connection.runtime);
    const id = crypto.randomUUID();
    const deadlineMs = this.deadlineMs();
    const frame = JSON.stringify({ type: "tool_request", id, tool, arguments: args, deadline_ms: deadlineMs });
    if (exceedsBytes(frame, MAX_FRAME_BYTES)) {
      return relayError("arguments_too_large", `the call's arguments exceed the ${MAX_FRAME_BYTES}-byte frame limit`, false, "not_delivered");
    }
    return new Promise<CallOutcome>((resolve) => {
      const pending: Pending = {
        connection_id: connection.connection_id,
        cancel_key: cancelKey,
        settle: (outcome) => {
          clearTimeout(pending.deadline);
          this.pending.delete(id);
          resolve(outcome);
        },
        deadline: setTimeout(() => this.expire(id), deadlineMs),
        chunks: [],
        chunk_count: 0,
        chunk_bytes: 0,
      };
      this.pending.set(id, pending);
      try {
        ws.send(frame);
      } catch {
        pending.settle(relayError("device_offline", "the link closed before the call was sent; call again", true, "not_delivered"));
      }
    });
  }

  /**
   * Cancel the call the MCP client knows by `cancelKey`: the link is sent `cancel`, and the call
   * is answered `cancelled` with the delivery state of its cancel_ack (or delivery_unknown when
   * no ack comes in time). False when no such call is pending.
   */
  async cancel(cancelKey: string): Promise<boolean> {
    for (const [id, pending] of this.pending) {
      if (pending.cancel_key !== cancelKey) continue;
      const ws = this.ctx.getWebSockets(pending.connection_id)[0];
      try {
        ws?.send(JSON.stringify({ type: "cancel", id }));
      } catch {
        // The link is gone: its close answers the call delivery_unknown.
      }
      clearTimeout(pending.deadline);
      pending.deadline = setTimeout(
        () => pending.settle(relayError("cancelled", "the call was cancelled; the link did not confirm in time, so it may have run", false, "delivery_unknown")),
        CANCEL_ACK_WAIT_MS,
      );
      return true;
    }
    return false;
  }

  /** The owner revoked `grantId` (a grant of this device): its calls are refused from now on. */
  async revokeGrant(grantId: string): Promise<void> {
    const now = Date.now();
    const kept = await this.ctx.storage.list<number>({ prefix: REVOKED_GRANT_PREFIX });
    const old = [...kept].filter(([, at]) => now - at >= REVOKED_GRANT_RETAIN_MS).map(([key]) => key);
    if (old.length > 0) await this.ctx.storage.delete(old);
    await this.ctx.storage.put(REVOKED_GRANT_PREFIX + grantId, now);
  }

  /** Whether `grantId` was revoked within the last two hours. */
  async grantRevoked(grantId: string): Promise<boolean> {
    const at = await this.ctx.storage.get<number>(REVOKED_GRANT_PREFIX + grantId);
    return at !== undefined && Date.now() - at < REVOKED_GRANT_RETAIN_MS;
  }

  /** Online state, last heartbeat and the active runtime identity (no secrets). */
  async status(): Promise<DeviceStatus> {
    const record = await this.record();
    const current = this.currentConnection()?.[1];
    const runtime = current?.runtime ?? record?.runtime ?? null;
    return {
      device_id: current?.device_id ?? record?.device_id ?? null,
      online: current !== undefined && Date.now() - current.last_heard_at < this.silenceMs(),
      connected_at: iso(current?.connected_at ?? record?.connected_at ?? null),
      disconnected_at: current ? null : iso(record?.disconnected_at ?? null),
      last_heartbeat_at: iso(record?.last_heartbeat_at ?? null),
      link_version: current?.link_version ?? record?.link_version ?? null,
      runtime,
      contract_compatible: await contractCompatible(runtime?.contract),
    };
  }

  private async handleFrame(ws: WebSocket, connection: Connection, frame: LinkFrame): Promise<void> {
    switch (frame.type) {
      case "hello":
        if (connection.hello) {
          this.dropConnection(ws, CLOSE_POLICY_VIOLATION, "hello was already received");
        } else if (frame.device_id !== connection.device_id) {
          this.dropConnection(ws, CLOSE_POLICY_VIOLATION, "hello names another device");
        } else {
          connection.hello = true;
          connection.link_version = frame.link_version;
          connection.runtime = frame.runtime;
          this.send(ws, connection, {
            type: "hello_ack",
            protocol: PROTOCOL_VERSION,
            connection_id: connection.connection_id,
            heartbeat_s: this.heartbeatMs() / 1000,
            silence_limit_s: this.silenceMs() / 1000,
            max_frame_bytes: MAX_FRAME_BYTES,
          });
          await this.saveRecord(connection, { connected_at: connection.connected_at, disconnected_at: null });
        }
        return;
      case "heartbeat":
        connection.runtime = frame.runtime;
        this.sendHeartbeat(ws, connection);
        await this.saveRecord(connection, {});
        return;
      case "tool_result":
        this.pendingOf(connection, frame.id)?.settle({ result: frame.result });
        return;
      case "tool_result_chunk":
        this.takeChunk(connection, frame);
        return;
      case "tool_error": {
        const { code, message, retryable, delivery_state } = frame;
        this.pendingOf(connection, frame.id)?.settle({ error: { code, message, retryable, delivery_state } });
        return;
      }
      case "cancel_ack":
        this.pendingOf(connection, frame.id)?.settle(
          relayError("cancelled", "the call was cancelled at the client's request", false, frame.delivery_state),
        );
        return;
      case "control_request":
        // Answered on its own: awaiting it here would let frames handled meanwhile (a heartbeat's
        // new runtime) be overwritten when this handler saves the attachment it started with.
        this.ctx.waitUntil(this.answerControl(ws, connection.device_id, frame));
        return;
      case "unknown":
        return;
    }
  }

  private async answerControl(
    ws: WebSocket,
    deviceId: string,
    frame: Extract<LinkFrame, { type: "control_request" }>,
  ): Promise<void> {
    const outcome = await handleControl(this.env, deviceId, frame.method, frame.params);
    try {
      ws.send(JSON.stringify({ type: "control_result", id: frame.id, ...outcome }));
    } catch {
      // The link closed meanwhile; the owner's command reports the lost connection itself.
    }
  }

  /** Reassemble a chunked result in order, refusing one above MAX_RESULT_BYTES. */
  private takeChunk(connection: Connection, frame: Extract<LinkFrame, { type: "tool_result_chunk" }>): void {
    const pending = this.pendingOf(connection, frame.id);
    if (!pending) return;
    const expected = pending.chunks.length;
    if (frame.index !== expected || (expected > 0 && frame.count !== pending.chunk_count)) {
      pending.settle(relayError("result_chunks_out_of_order", `chunk ${frame.index} of ${frame.count} arrived where chunk ${expected} of ${pending.chunk_count || frame.count} was due`, false, "delivered"));
      return;
    }
    pending.chunk_count = frame.count;
    pending.chunk_bytes += new TextEncoder().encode(frame.data).byteLength;
    if (pending.chunk_bytes > MAX_RESULT_BYTES) {
      pending.settle(relayError("result_too_large", `the result exceeds the Edge's ${MAX_RESULT_BYTES}-byte limit; ask for less (a range, a limit)`, false, "delivered"));
      return;
    }
    pending.chunks.push(frame.data);
    if (pending.chunks.length < frame.count) return;
    let result: unknown;
    try {
      result = JSON.parse(pending.chunks.join(""));
    } catch {
      result = undefined;
    }
    if (typeof result !== "object" || result === null || Array.isArray(result)) {
      pending.settle(relayError("result_malformed", "the reassembled result is not a JSON object", false, "delivered"));
      return;
    }
    pending.settle({ result: result as Record<string, unknown> });
  }

  /** The deadline passed: cancel at the link and answer delivery_unknown (it may have run). */
  private expire(id: string): void {
    const pending = this.pending.get(id);
    if (!pending) return;
    try {
      this.ctx.getWebSockets(pending.connection_id)[0]?.send(JSON.stringify({ type: "cancel", id }));
    } catch {
      // Gone already; the answer is the same.
    }
    pending.settle(relayError("deadline_exceeded", "the workstation did not answer in time; the call may have run, check before repeating it", false, "delivery_unknown"));
  }

  /**
   * Close a connection and answer every call still pending on it delivery_unknown: it may have
   * reached the runtime, so the Edge never re-sends it (on this link or the next).
   */
  private dropConnection(ws: WebSocket, code: number, reason: string): void {
    const connection = ws.deserializeAttachment() as Connection | null;
    if (connection) {
      for (const [id, pending] of this.pending) {
        if (pending.connection_id !== connection.connection_id) continue;
        this.pending.get(id)?.settle(
          relayError("link_lost", "the workstation's link dropped while the call was in flight; it may have run, check before repeating it", false, "delivery_unknown"),
        );
      }
      if (connection.hello) {
        this.ctx.waitUntil(this.saveRecord(connection, { disconnected_at: Date.now() }));
      }
    }
    try {
      ws.close(code, reason.slice(0, 120));
    } catch {
      // Already closed.
    }
  }

  private pendingOf(connection: Connection, id: string): Pending | undefined {
    const pending = this.pending.get(id);
    return pending?.connection_id === connection.connection_id ? pending : undefined;
  }

  /** The open connection that has said hello (at most one: a new one replaces the old). */
  private currentConnection(): [WebSocket, Connection] | undefined {
    for (const ws of this.ctx.getWebSockets()) {
      const connection = ws.deserializeAttachment() as Connection | null;
      if (connection?.hello && ws.readyState === WebSocket.OPEN) return [ws, connection];
    }
    return undefined;
  }

  private sendHeartbeat(ws: WebSocket, connection: Connection): void {
    connection.sent_seq += 1;
    this.send(ws, connection, { type: "heartbeat", seq: connection.sent_seq });
  }

  private send(ws: WebSocket, connection: Connection, frame: Record<string, unknown>): void {
    connection.last_sent_at = Date.now();
    ws.send(JSON.stringify(frame));
  }

  private async record(): Promise<DeviceRecord | undefined> {
    return this.ctx.storage.get<DeviceRecord>(DEVICE_KEY);
  }

  private async saveRecord(connection: Connection, change: Partial<DeviceRecord>): Promise<void> {
    const previous = await this.record();
    if (change.disconnected_at && previous?.connection_id !== connection.connection_id) return;
    const record: DeviceRecord = {
      device_id: connection.device_id,
      connection_id: connection.connection_id,
      connected_at: previous?.connected_at ?? connection.connected_at,
      disconnected_at: previous?.disconnected_at ?? null,
      last_heartbeat_at: connection.last_heard_at,
      link_version: connection.link_version,
      runtime: connection.runtime,
      ...change,
    };
    await this.ctx.storage.put(DEVICE_KEY, record);
  }

  private heartbeatMs(): number {
    return positive(this.env.RELAY_HEARTBEAT_S, HEARTBEAT_S) * 1000;
  }

  private silenceMs(): number {
    return positive(this.env.RELAY_SILENCE_LIMIT_S, SILENCE_LIMIT_S) * 1000;
  }

  private deadlineMs(): number {
    return positive(this.env.RELAY_DEADLINE_MS, DEFAULT_DEADLINE_MS);
  }
}

function relayError(code: string, message: string, retryable: boolean, delivery_state: DeliveryState): { error: RelayError } {
  return { error: { code, message, retryable, delivery_state } };
}

/** The call is refused: the device's runtime is not the one the public contract is built from. */
async function contractMismatch(runtime: RuntimeIdentity | null): Promise<{ error: RelayError }> {
  const want = await expectedRuntimeContract();
  const announced = runtime
    ? `runtime contract epoch ${runtime.contract.epoch ?? "unknown"} (${runtime.contract.hash}, ${runtime.contract.tool_count ?? "?"} tools)`
    : "no runtime contract";
  return relayError(
    "contract_mismatch",
    `the workstation announces ${announced}; this Edge serves edge contract epoch 8, built from runtime contract epoch ${want.epoch} (${want.hash}, ${want.tool_count} tools), and relays to nothing else. On the workstation, activate a generation with runtime contract epoch ${want.epoch} (\`herdr-mcp update\` or \`herdr-mcp generation activate <id>\`); \`herdr-mcp link status\` shows what it announces`,
    false,
    "not_delivered",
  );
}

/** A positive number from a variable, else the default. */
function positive(value: string | undefined, fallback: number): number {
  const parsed = Number(value);
  return value !== undefined && Number.isFinite(parsed) && parsed > 0 ? parsed : fallback;
}

function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString();
}
