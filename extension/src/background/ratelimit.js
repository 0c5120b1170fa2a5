// HTTP 429 from chatgpt.com, seen by observing the site's responses with chrome.webRequest
// (observation only: nothing is blocked or changed). One pause per burst: 30 s, 60 s, 120 s
// (cap); while paused the extension sends nothing into ChatGPT's pages, and it never reloads
// them. The other sites (z.ai, DeepSeek) are not observed: for them there is never a pause.

import { initialBackoff, isPaused, on429, onConfirmedSend, remainingMs } from "../lib/backoff.js";
import * as keys from "../lib/storage-keys.js";
import * as store from "./store.js";

/** The site whose responses are observed (`observe`). */
const OBSERVED_SITE = "chatgpt";

export class RateLimit {
  constructor({ now = () => Date.now(), onChange = () => {} } = {}) {
    this.now = now;
    this.onChange = onChange;
  }

  /** Register the observer; called at the worker's top level so it survives worker restarts. */
  observe() {
    chrome.webRequest.onCompleted.addListener(
      (details) => {
        if (details.statusCode === 429) {
          this.hit().catch(() => {});
        }
      },
      { urls: ["https://chatgpt.com/*"] },
    );
  }

  async hit() {
    const state = await store.update(keys.BACKOFF, initialBackoff(), (value) => on429(value, this.now()));
    this.onChange(state);
    return state;
  }

  /** A send confirmed on a page of `site`: the end of a pause's ladder (ChatGPT's only). */
  async confirmedSend(site) {
    if (site !== OBSERVED_SITE) {
      return;
    }
    await store.update(keys.BACKOFF, initialBackoff(), (value) => onConfirmedSend(value, this.now()));
  }

  /** Milliseconds left in the current pause of `site` (0: sending is allowed). */
  async remaining(site) {
    if (site !== OBSERVED_SITE) {
      return 0;
    }
    const state = await store.get(keys.BACKOFF, initialBackoff());
    return isPaused(state, this.now()) ? remainingMs(state, this.now()) : 0;
  }
}
