// Follows `GET /push/events` through the native port: resumes after the highest seq it handled
// (persisted), so settles that happened while the browser was closed are replayed once; a seq
// is recorded only after its handler finished. Reopens the stream with backoff when it ends.

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
    const lastSeq = await store.get("push:lastSeq", null);
    const query = lastSeq === null ? {} : { after: String(lastSeq) };
    this.cancel = this.native.stream(
      "/push/events",
      query,
      (type, data) => this.enqueue(type, data),
      (error) => this.ended(error),
    );
  }

  enqueue(type, data) {
    // Events are handled one at a time, in order, each to the end before the next.
    this.chain = this.chain.then(() => this.dispatch(type, data)).catch((error) => {
      this.log.error("herdr-mcp: handling a push event failed", type, error);
    });
  }

  async dispatch(type, data) {
    if (type === "hello") {
      this.retries = 0;
      const lastSeq = await store.get("push:lastSeq", null);
      if (lastSeq === null) {
        // A first start: live from now on, no history replayed.
        await store.set("push:lastSeq", data.seq);
      }
      await this.onHello(data, lastSeq);
      return;
    }
    const seq = data?.seq;
    const lastSeq = await store.get("push:lastSeq", 0);
    // agent_output is not in the durable log (its seq may equal the last durable one): never
    // skipped by seq, never recorded as handled.
    if (type !== "agent_output" && typeof seq === "number" && seq <= lastSeq) {
      return; // already handled (a replay overlapping what we saw live)
    }
    await this.handle(type, data);
    if (typeof seq === "number" && type !== "agent_output") {
      await store.set("push:lastSeq", seq);
    }
  }

  ended(error) {
    this.cancel = null;
    if (!this.running) {
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
    if (this.running && !this.cancel) {
      this.open();
    }
  }
}
