// Auto rollover (lib/rollover.js decides): every time a conversation reports its finalized turns,
// the context-pressure estimate of that conversation is updated (its message-count floor kept in
// `floor:<conv key>`), and when the estimate is high and every precondition holds, the same
// handoff as the HUD's Hand off starts (background/handoff.js). Off by default (options).
// Page health's `rollover_recommended` (its recovery budget spent) starts one too, under the same
// preconditions without the estimate, once per episode; otherwise the HUD says to press Hand off.

import { decide, decideRecommended, nextFloor, pressure, rolloverOptions } from "../lib/rollover.js";
import { wakeTarget } from "../lib/scope.js";
import { t } from "../lib/i18n.js";
import * as keys from "../lib/storage-keys.js";
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
    const metrics = message.metrics ?? {};
    const shared = page?.convKey === message.convKey ? await this.preconditions(page, metrics) : null;
    if (!shared) {
      return false;
    }
    const options = rolloverOptions(await store.get(keys.OPTIONS, {}));
    const health = await store.get(keys.health(page.convKey), null);
    const episodeAt = health?.episode?.startedAt ?? null;
    const handedOff = await store.get(keys.handoff(page.scope), null);
    const floor = await store.update(keys.floor(page.convKey), 0, (value) => nextFloor(value, 0, metrics.maxTurnIndex));
    const state = {
      ...shared,
      messages: floor,
      recommended: health?.episode?.state === "rollover_recommended",
      alreadyStarted:
        (await store.get(keys.healthRollover(page.convKey), null)) === episodeAt ||
        (handedOff?.phase === "done" && handedOff.sourceConvKey === page.convKey),
    };
    const decision = decideRecommended(state, options);
    if (!decision.go) {
      if (state.recommended && !state.alreadyStarted) {
        this.continuity.note(page.scope, t("noteRolloverBlocked", decision.blocked.join(", ")));
        this.continuity.broadcast();
      }
      return false;
    }
    let claimed = false;
    await store.update(keys.healthRollover(page.convKey), null, (started) => {
      claimed = started !== episodeAt;
      return episodeAt;
    });
    if (!claimed) {
      return false;
    }
    return this.start(tab, t("noteRolloverHealth"));
  }

  /** `report`: the content script's "turns" message ({turns, metrics}). */
  async consider(tab, report) {
    const page = tab.page;
    const metrics = report.metrics ?? {};
    const shared = await this.preconditions(page, metrics);
    if (!shared) {
      return false;
    }
    const options = rolloverOptions(await store.get(keys.OPTIONS, {}));
    const turns = report.turns ?? [];
    const floor = await store.update(keys.floor(page.convKey), 0, (value) => nextFloor(value, turns.length, metrics.maxTurnIndex));
    const estimate = pressure(turns, floor, options);
    const decision = decide({ ...shared, ratio: estimate.ratio, messages: estimate.messages }, options);
    this.pressures.set(page.scope, { ratio: estimate.ratio, tokens: estimate.tokens, blocked: decision.blocked, on: options.rolloverAuto });
    if (!decision.go) {
      return false;
    }
    return this.start(tab, t("noteRolloverContext", Math.round(estimate.ratio * 100)));
  }

  /**
   * What both triggers check of `page` (`metrics`: the page's own signals): null when the page
   * does not roll over at all (no conversation, or not a Project's active one), else the
   * preconditions `decide` and `decideRecommended` share.
   */
  async preconditions(page, metrics) {
    if (!page?.convKey || page.kind === "root") {
      return null;
    }
    const binding = this.bindings.get(page.scope);
    if (binding && wakeTarget(page.scope, binding) !== page.convKey) {
      return null; // in a Project only the active conversation rolls over
    }
    const workspace = binding ? await store.get(keys.workspace(binding.workspace_id), null) : null;
    return {
      auto: (await store.get(keys.auto(page.scope), false)) === true,
      working: Boolean(workspace?.working),
      generating: Boolean(metrics.generating),
      card: Boolean(metrics.card),
      draft: Boolean(metrics.draft),
      uncertain: (await store.get(keys.uncertain(page.convKey), false)) === true,
      handoffBusy: this.handoff.anyBusy(),
    };
  }

  /** The same handoff as the HUD's Hand off, with `line` in the HUD first; false when it did not start. */
  async start(tab, line) {
    this.continuity.note(tab.page.scope, line);
    try {
      await this.handoff.begin(tab);
    } catch (error) {
      this.continuity.note(tab.page.scope, t("noteRolloverNotStarted", error.code ?? "failed", error.message));
      return false;
    }
    return true;
  }
}
