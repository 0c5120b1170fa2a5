// Auto rollover (lib/rollover.js decides): every time a conversation reports its finalized turns,
// the context-pressure estimate of that conversation is updated (its message-count floor kept in
// `floor:<conv key>`), and when the estimate is high and every precondition holds, the same
// handoff as the HUD's Hand off starts (background/handoff.js). Off by default (options).
// Page health's `rollover_recommended` (its recovery budget spent) starts one too, under the same
// preconditions without the estimate, once per episode; otherwise the HUD says to press Hand off.

import { decide, decideRecommended, nextFloor, pressure, rolloverOptions } from "../lib/rollover.js";
import { wakeTarget } from "../lib/scope.js";
import * as store from "./store.js";

export class Rollover {
  constructor({ bindings, handoff, continuity, log = console }) {
    this.bindings = bindings;
    this.handoff = handoff;
    this.continuity = continuity;
    this.log = log;
    /** scope -> {ratio, tokens, blocked, on}: what the HUD shows. */
    this.pressures = new Map();
  }

  view(scope) {
    return this.pressures.get(scope) ?? null;
  }

  /**
   * The page says page health recommends a rollover (`{convKey, metrics}`). The durable record
   * `health:<conv key>` is the evidence (a message alone is not); the episode's `startedAt` is
   * written to `healthRollover:<conv key>` before the handoff starts (a key of the worker's own:
   * the content script rewrites `health:`), so one episode starts at most one; a conversation
   * already handed off is not handed off again.
   */
  async recommended(tab, message) {
    const page = tab.page;
    if (!page?.convKey || page.convKey !== message.convKey || page.kind === "root") {
      return false;
    }
    const binding = this.bindings.get(page.scope);
    if (binding && wakeTarget(page.scope, binding) !== page.convKey) {
      return false; // in a Project only the active conversation rolls over
    }
    const options = rolloverOptions(await store.get("options", {}));
    const metrics = message.metrics ?? {};
    const key = `health:${page.convKey}`;
    const health = await store.get(key, null);
    const episodeAt = health?.episode?.startedAt ?? null;
    const handedOff = await store.get(`handoff:${page.scope}`, null);
    const workspace = binding ? await store.get(`ws:${binding.workspace_id}`, null) : null;
    const floor = await store.update(`floor:${page.convKey}`, 0, (value) => nextFloor(value, 0, metrics.maxTurnIndex));
    const state = {
      messages: floor,
      auto: (await store.get(`auto:${page.scope}`, false)) === true,
      working: Boolean(workspace?.working),
      generating: Boolean(metrics.generating),
      card: Boolean(metrics.card),
      draft: Boolean(metrics.draft),
      uncertain: (await store.get(`uncertain:${page.convKey}`, false)) === true,
      handoffBusy: this.handoff.anyBusy(),
      recommended: health?.episode?.state === "rollover_recommended",
      alreadyStarted:
        (await store.get(`healthRollover:${page.convKey}`, null)) === episodeAt ||
        (handedOff?.phase === "done" && handedOff.sourceConvKey === page.convKey),
    };
    const decision = decideRecommended(state, options);
    if (!decision.go) {
      if (state.recommended && !state.alreadyStarted) {
        this.continuity.note(page.scope, `page health recommends a rollover; not automatic (${decision.blocked.join(", ")}): press Hand off`);
        this.continuity.broadcast();
      }
      return false;
    }
    let claimed = false;
    await store.update(`healthRollover:${page.convKey}`, null, (started) => {
      claimed = started !== episodeAt;
      return episodeAt;
    });
    if (!claimed) {
      return false;
    }
    this.continuity.note(page.scope, "page health: recovery budget spent: rolling over");
    try {
      await this.handoff.begin(tab);
    } catch (error) {
      this.continuity.note(page.scope, `rollover not started (${error.code ?? "failed"}): ${error.message}`);
      return false;
    }
    return true;
  }

  /** `report`: the content script's "turns" message ({turns, metrics}). */
  async consider(tab, report) {
    const page = tab.page;
    if (!page?.convKey || page.kind === "root") {
      return false;
    }
    const binding = this.bindings.get(page.scope);
    if (binding && wakeTarget(page.scope, binding) !== page.convKey) {
      return false; // in a Project only the active conversation rolls over
    }
    const options = rolloverOptions(await store.get("options", {}));
    const metrics = report.metrics ?? {};
    const turns = report.turns ?? [];
    const floor = await store.update(`floor:${page.convKey}`, 0, (value) => nextFloor(value, turns.length, metrics.maxTurnIndex));
    const estimate = pressure(turns, floor, options);
    const workspace = binding ? await store.get(`ws:${binding.workspace_id}`, null) : null;
    const decision = decide(
      {
        ratio: estimate.ratio,
        messages: estimate.messages,
        auto: (await store.get(`auto:${page.scope}`, false)) === true,
        working: Boolean(workspace?.working),
        generating: Boolean(metrics.generating),
        card: Boolean(metrics.card),
        draft: Boolean(metrics.draft),
        uncertain: (await store.get(`uncertain:${page.convKey}`, false)) === true,
        handoffBusy: this.handoff.anyBusy(),
      },
      options,
    );
    this.pressures.set(page.scope, { ratio: estimate.ratio, tokens: estimate.tokens, blocked: decision.blocked, on: options.rolloverAuto });
    if (!decision.go) {
      return false;
    }
    this.continuity.note(page.scope, `context ~${Math.round(estimate.ratio * 100)}%: rolling over`);
    try {
      await this.handoff.begin(tab);
    } catch (error) {
      this.continuity.note(page.scope, `rollover not started (${error.code ?? "failed"}): ${error.message}`);
      return false;
    }
    return true;
  }
}
