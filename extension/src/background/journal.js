// Finalized turns of bound conversations go to the continuity journal (`/browser/turn.append`,
// idempotent by turn key); the keys already appended are remembered per conversation so a page
// that reports its turns again does not call the runtime again.

import { conversationUrl } from "../lib/scope.js";
import { cutCodePoints, wellFormed } from "../lib/text.js";
import * as keys from "../lib/storage-keys.js";
import * as store from "./store.js";

const REMEMBERED_KEYS = 500;
// The runtime's maxLength for a title, in code points (lib/text.js: never cut inside a pair).
const TITLE_CODE_POINTS = 200;

export class Journal {
  constructor(native, bindings, log = console) {
    this.native = native;
    this.bindings = bindings;
    this.log = log;
    this.chain = Promise.resolve();
  }

  /** `turns`: [{key, role, text}] in page order, all finalized. */
  report(page, turns, title) {
    this.chain = this.chain.then(() => this.append(page, turns, title)).catch((error) => {
      this.log.warn("herdr-mcp: journaling turns failed", error.code ?? "", error.message);
    });
    return this.chain;
  }

  async append(page, turns, title) {
    const url = conversationUrl(page);
    if (!url || !this.bindings.get(page.scope)) {
      return 0;
    }
    const key = keys.journal(page.convKey);
    const done = new Set(await store.get(key, []));
    // A handoff's target conversation continues the source's chain (background/handoff.js).
    const chain = await store.get(keys.chain(page.convKey), null);
    let appended = 0;
    for (const turn of turns) {
      if (done.has(turn.key) || !turn.key || !["user", "assistant"].includes(turn.role)) {
        continue;
      }
      const text = wellFormed(turn.text);
      const body = { scope: page.scope, conversation_url: url, turn_key: turn.key, role: turn.role, text };
      if (title) {
        body.title = cutCodePoints(title, TITLE_CODE_POINTS);
      }
      if (chain) {
        body.continuity_id = chain;
      }
      await this.native.call("/browser/turn.append", body);
      done.add(turn.key);
      appended += 1;
      await store.set(key, [...done].slice(-REMEMBERED_KEYS));
    }
    return appended;
  }
}
