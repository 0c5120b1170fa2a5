// Follows `GET /push/events` through the native port: resumes after the highest seq it handled
// (persisted), so settles that happened while the browser was closed are replayed once; a seq
// is recorded only after its handler finished. Reopens the stream with backoff when it ends.
// At most one stream at a time: the backoff timer, the native port coming back and a reopen
// that reconnects the port itself (post -> connect -> onConnection -> reconnected) all meet in
// `open`, which does nothing while a stream is open or being opened (after a native-host
// restart the worker used to hold two, and every progress line came twice).

import * as keys from "../lib/storage-keys.js";
import { mark } from "../lib/trace.js";
import * as store from "./store.js";

const RETRY_STEPS_MS = [1_000, 2_000, 5_000, 10_000, 30_000];

export class PushFollower {
  constructor(native, handle, { onHello = async () => {}, log = console } = {}) {
    this.native = native;
    this.handle = handle;
    this.onHello = onHello;
    this.log = log;
    this.cancel = null;
    this.retries = 0;
    this.timer = null;
    this.chain = Promise.resolve();
    this.running = false;
    this.opening = false;
    this.opened = 0; // streams opened, for tests and the console
    // The persisted seq as this follower (its only writer) last read or wrote it: an event is
    // checked against it without a storage round trip first.
    this.lastSeq = null;
  }

  async start() {
    if (this.running) {
      return;
    }
    this.running = true;
    await this.open();
  }

  async open() {
    clearTimeout(this.timer);
    this.timer = null;
    if (this.opening || this.cancel || !this.running) {
      return; // one stream: already open, or being opened
    }
    this.opening = true;
    try {
      const lastSeq = await store.get(keys.PUSH_LAST_SEQ, null);
      this.lastSeq = lastSeq;
      let ended = false;
      const cancel = this.native.stream(
        "/push/events",
        query(lastSeq),
        (type, data) => this.enqueue(type, data),
        (error) => {
          ended = true;
          if (this.cancel === cancel || this.cancel === null) {
            this.ended(error);
          }
        },
      );
      this.opened += 1;
      // A stream that failed at once (no port) has ended already: leave it closed for the retry.
      this.cancel = ended ? null : cancel;
    } finally {
      this.opening = false;
    }
  }

  enqueue(type, data) {
    if (type !== "agent_output") {
      mark("herdr:push", { type, seq: data?.seq ?? null }); // its arrival (benchmarks/wake_bench.py)
    }
    // Events are handled one at a time, in order, each to the end before the next.
    this.chain = this.chain.then(() => this.dispatch(type, data)).catch((error) => {
      this.log.error("herdr-mcp: handling a push event failed", type, error);
    });
  }

  async dispatch(type, data) {
    if (type === "hello") {
      this.retries = 0;
      const lastSeq = await store.get(keys.PUSH_LAST_SEQ, null);
      this.lastSeq = lastSeq;
      if (lastSeq === null) {
        // A first start: live from now on, no history replayed.
        await store.set(keys.PUSH_LAST_SEQ, data.seq);
        this.lastSeq = data.seq;
      }
      await this.onHello(data, lastSeq);
      return;
    }
    const seq = data?.seq;
    const lastSeq = this.lastSeq ?? 0;
    // agent_output is not in the durable log (its seq may equal the last durable one): never
    // skipped by seq, never recorded as handled.
    if (type !== "agent_output" && typeof seq === "number" && seq <= lastSeq) {
      return; // already handled (a replay overlapping what we saw live)
    }
    await this.handle(type, data);
    if (typeof seq === "number" && type !== "agent_output") {
      await store.set(keys.PUSH_LAST_SEQ, seq);
      this.lastSeq = seq;
    }
  }

  ended(error) {
    this.cancel = null;
    if (!this.running || this.timer) {
      return;
    }
    if (error) {
      this.log.warn("herdr-mcp: push stream ended", error.code ?? "", error.message);
    }
    const delay = RETRY_STEPS_MS[Math.min(this.retries, RETRY_STEPS_MS.length - 1)];
    this.retries += 1;
    this.timer = setTimeout(() => this.open(), delay);
  }

  /** The native port came back: reopen at once rather than after the backoff. */
  reconnected() {
    if (this.running && !this.cancel && !this.opening) {
      this.open();
    }
  }
}

function query(lastSeq) {
  return lastSeq === null ? {} : { after: String(lastSeq) };
}
