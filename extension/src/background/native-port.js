// The one native messaging port to `herdr-mcp native-host` (docs/browser-protocol.md section 4):
// request/reply by id, chunked replies reassembled, SSE streams, and a reconnect with backoff
// when the host goes away. While the port is open Chrome keeps this service worker alive.
// The host serves at most MAX_IN_FLIGHT requests and streams at once and refuses the next one
// (src/herdr_mcp/native_host/host.py: `invalid_request`, "64 requests are in flight"): requests
// beyond the cap wait here in order, and a refusal for the cap puts the request back at the head
// of the queue, sent again when an answer frees a place (or after RETRY_REFUSED_MS).

import { Reassembler } from "../lib/chunks.js";

export const HOST_NAME = "com.herdr_mcp.host";
export const REQUEST_TIMEOUT_MS = 30_000;
const RECONNECT_STEPS_MS = [500, 1_000, 2_000, 5_000, 10_000, 30_000];
/** The host's cap on requests and streams in flight (host.py MAX_IN_FLIGHT). */
export const MAX_IN_FLIGHT = 64;
const RETRY_REFUSED_MS = 200;
/** The host's refusal for the cap (and not its "request <id> is still in flight"). */
const CAP_REFUSAL = /^\d+ requests are in flight$/;

/** Whether a host error frame is the refusal for its request cap. */
export function isCapRefusal(error) {
  return error?.code === "invalid_request" && CAP_REFUSAL.test(String(error.message ?? ""));
}

export class NativeError extends Error {
  constructor(code, message, status = null) {
    super(message);
    this.code = code;
    this.status = status;
  }
}

export class NativeClient {
  constructor({ connectNative = (name) => chrome.runtime.connectNative(name), log = console } = {}) {
    this.connectNative = connectNative;
    this.log = log;
    this.port = null;
    this.nextId = 1;
    this.pending = new Map(); // sent, awaiting the answer
    this.waiting = []; // not sent yet: the host's cap is reached (or it refused for the cap)
    this.retryTimer = null;
    this.streams = new Map();
    this.chunks = new Reassembler();
    this.failures = 0;
    this.reconnectTimer = null;
    this.listeners = new Set();
    this.connected = false;
  }

  /** Called with `true` when the port opens and `false` when it goes away. */
  onConnection(listener) {
    this.listeners.add(listener);
  }

  connect() {
    if (this.port) {
      return;
    }
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = null;
    let port;
    try {
      port = this.connectNative(HOST_NAME);
    } catch (error) {
      this.log.warn("herdr-mcp: connectNative failed", error);
      this.scheduleReconnect();
      return;
    }
    this.port = port;
    port.onMessage.addListener((frame) => this.receive(frame));
    port.onDisconnect.addListener(() => this.disconnected(port));
    this.connected = true;
    for (const listener of this.listeners) {
      listener(true);
    }
  }

  disconnected(port) {
    if (this.port !== port) {
      return;
    }
    const reason = globalThis.chrome?.runtime?.lastError?.message ?? "the native host went away";
    this.port = null;
    this.connected = false;
    this.chunks.drop();
    const error = new NativeError("runtime_unavailable", `herdr-mcp native host disconnected: ${reason}`);
    for (const { reject, timer } of [...this.pending.values(), ...this.waiting]) {
      clearTimeout(timer);
      reject(error);
    }
    this.pending.clear();
    this.waiting = [];
    clearTimeout(this.retryTimer);
    this.retryTimer = null;
    const streams = [...this.streams.values()];
    this.streams.clear();
    for (const stream of streams) {
      stream.onEnd(error);
    }
    for (const listener of this.listeners) {
      listener(false);
    }
    this.failures += 1;
    this.scheduleReconnect();
  }

  scheduleReconnect() {
    if (this.reconnectTimer) {
      return;
    }
    const delay = RECONNECT_STEPS_MS[Math.min(this.failures, RECONNECT_STEPS_MS.length - 1)];
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      this.connect();
    }, delay);
  }

  post(frame) {
    if (!this.port) {
      this.connect();
    }
    if (!this.port) {
      throw new NativeError("runtime_unavailable", "herdr-mcp native host is not connected");
    }
    this.port.postMessage(frame);
  }

  /**
   * One request; resolves with the body of a 2xx reply, rejects with a NativeError otherwise.
   * Held in order while the host's cap is reached; `timeoutMs` counts from the call.
   */
  request(method, path, body = undefined, { headers = null, timeoutMs = REQUEST_TIMEOUT_MS } = {}) {
    const id = `r${this.nextId++}`;
    const frame = body === undefined ? { id, method, path } : { id, method, path, body };
    if (headers) {
      frame.headers = headers; // POST /mcp only: the MCP headers (section 4)
    }
    return new Promise((resolve, reject) => {
      const entry = { id, frame, resolve, reject, timer: null };
      entry.timer = setTimeout(() => {
        this.pending.delete(id);
        this.waiting = this.waiting.filter((waiting) => waiting !== entry);
        this.chunks.drop(id);
        reject(new NativeError("timeout", `${method} ${path} had no answer in ${timeoutMs / 1000} s`));
        this.pump();
      }, timeoutMs);
      this.waiting.push(entry);
      this.pump();
    });
  }

  /** How many requests and streams the host holds for us. */
  inFlight() {
    return this.pending.size + this.streams.size;
  }

  /** Send waiting requests, in order, while the host has room. */
  pump() {
    while (this.waiting.length > 0 && this.inFlight() < MAX_IN_FLIGHT) {
      const entry = this.waiting.shift();
      this.pending.set(entry.id, entry);
      try {
        this.post(entry.frame);
      } catch (error) {
        clearTimeout(entry.timer);
        this.pending.delete(entry.id);
        entry.reject(error);
      }
    }
  }

  /** POST a /browser/* method. */
  call(path, body = {}) {
    return this.request("POST", path, body);
  }

  /**
   * Open a stream (`GET /push/events`); `onEvent(type, data)` per event, `onEnd(error|null)` once.
   * Returns a function that cancels it.
   */
  stream(path, query, onEvent, onEnd) {
    const id = `s${this.nextId++}`;
    this.streams.set(id, { onEvent, onEnd });
    try {
      this.post({ id, method: "GET", path, query, stream: true });
    } catch (error) {
      this.streams.delete(id);
      onEnd(error);
      return () => {};
    }
    return () => {
      if (this.streams.delete(id) && this.port) {
        this.port.postMessage({ id, cancel: true });
      }
    };
  }

  receive(frame) {
    if (!frame || typeof frame.id !== "string") {
      this.log.warn("herdr-mcp: a frame without an id from the native host", frame);
      return;
    }
    if (frame.chunk) {
      let whole;
      try {
        whole = this.chunks.add(frame);
      } catch (error) {
        this.settle(frame.id, null, new NativeError(error.code ?? "chunk_invalid", error.message));
        return;
      }
      if (whole) {
        this.receive({ ...whole, id: frame.id });
      }
      return;
    }
    const stream = this.streams.get(frame.id);
    if (stream) {
      if (frame.end || frame.error) {
        this.streams.delete(frame.id);
        const error = frame.error ? new NativeError(frame.error.code, frame.error.message) : null;
        stream.onEnd(error);
        this.pump();
      } else if (frame.event) {
        stream.onEvent(frame.event, frame.data);
      } else if (frame.status !== undefined && frame.status >= 400) {
        // The runtime refused to open the stream (a reply instead of events).
        this.streams.delete(frame.id);
        stream.onEnd(replyError(frame));
        this.pump();
      }
      return;
    }
    if (frame.error && isCapRefusal(frame.error) && this.pending.has(frame.id)) {
      // Refused for the cap (another request of ours, or a stream, took the place first): back to
      // the head of the queue, sent again when a place frees or after a short wait.
      const entry = this.pending.get(frame.id);
      this.pending.delete(frame.id);
      this.waiting.unshift(entry);
      this.retryLater();
      return;
    }
    if (frame.error) {
      this.settle(frame.id, null, new NativeError(frame.error.code, frame.error.message));
    } else if (frame.status >= 200 && frame.status < 300) {
      this.settle(frame.id, frame.body, null);
    } else {
      this.settle(frame.id, null, replyError(frame));
    }
  }

  settle(id, body, error) {
    const pending = this.pending.get(id);
    if (!pending) {
      return;
    }
    this.pending.delete(id);
    clearTimeout(pending.timer);
    if (error) {
      pending.reject(error);
    } else {
      this.failures = 0;
      pending.resolve(body);
    }
    this.pump();
  }

  retryLater() {
    if (this.retryTimer) {
      return;
    }
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.pump();
      if (this.waiting.length > 0 && this.inFlight() === 0) {
        this.retryLater();
      }
    }, RETRY_REFUSED_MS);
  }
}

function replyError(frame) {
  const error = frame.body?.error ?? {};
  return new NativeError(
    error.code ?? "http_error",
    error.message ?? `the runtime answered HTTP ${frame.status}`,
    frame.status,
  );
}
