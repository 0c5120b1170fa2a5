// The Control Center's side of the service worker: forwards the side panel's requests to the
// runtime's four Control Center methods (and refuses any other name before it leaves the
// browser; the native host's allowlist refuses again), and tells open extension pages when a
// push event changed what they show, so the panel re-reads at once instead of on its next tick.

import { ControlError, isControlMethod } from "../lib/control.js";

export class ControlCenter {
  constructor(native) {
    this.native = native;
  }

  /** POST /browser/<method> with `body`; rejects with the runtime's or the host's error code. */
  async request(method, body) {
    if (!isControlMethod(method)) {
      throw new ControlError("not_offered", `the Control Center does not offer ${method}`);
    }
    if (body === null || typeof body !== "object" || Array.isArray(body)) {
      throw new ControlError("invalid_argument", "the request body must be an object");
    }
    return this.native.request("POST", `/browser/${method}`, body);
  }

  /** A push event: open panels refresh (nobody listening is fine). */
  onEvent(type, data) {
    if (type === "hello") {
      return;
    }
    chrome.runtime
      .sendMessage({ type: "control.changed", event: type, pane_id: data?.pane_id ?? null })
      .catch(() => {});
  }
}
