// Auto rollover (seed 000, "自动接力"): when a long conversation's context is probably nearly
// full, hand it off by itself, but only when nothing could race the cutover. Pure: the worker
// (background/rollover.js) gathers the inputs.
//
// The pressure estimate is deliberately conservative, because the page shows less than the model
// holds (ChatGPT virtualises old turns; Project instructions, system and tool payloads are not
// visible at all):
//   - approximate tokens of the visible user/assistant text (about 4 characters per token, one
//     per CJK character);
//   - messages the page does not show: the larger of the highest absolute turn number the page
//     names and a persisted floor that only grows, minus the visible ones, each counted at the
//     visible messages' average size;
//   - a fixed reserve for what is never visible.
// A high estimate only makes a rollover possible. It happens only with: the rollover option on
// (off by default), Auto on for the scope, the bound workspace not working, no reply streaming,
// no tool or permission card waiting, no draft of the person's in the composer, no unconfirmed
// send, no other handoff under way, and at least MIN_MESSAGES messages in the conversation (a
// handoff's fresh target is not handed off again at once, whatever the estimate says).

export const DEFAULTS = Object.freeze({
  rolloverAuto: false,
  /** The model's context window the estimate is compared with, in tokens. */
  rolloverContextTokens: 128_000,
  /** Roll over at this share of the window. */
  rolloverThreshold: 0.8,
  /** Tokens set aside for Project instructions, system prompt and tool payloads. */
  rolloverReserveTokens: 12_000,
});

export const MIN_MESSAGES = 4;

export function rolloverOptions(raw) {
  const number = (value, fallback, low, high) =>
    Number.isFinite(value) && value >= low && value <= high ? value : fallback;
  return {
    rolloverAuto: raw?.rolloverAuto === true,
    rolloverContextTokens: number(raw?.rolloverContextTokens, DEFAULTS.rolloverContextTokens, 1, 10_000_000),
    rolloverThreshold: number(raw?.rolloverThreshold, DEFAULTS.rolloverThreshold, 0.05, 1),
    rolloverReserveTokens: number(raw?.rolloverReserveTokens, DEFAULTS.rolloverReserveTokens, 0, 10_000_000),
  };
}

const WIDE = /[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]/gu;

/** Approximate tokens of `text`: one per CJK/kana/hangul character, one per 4 other characters. */
export function estimateTokens(text) {
  if (!text) {
    return 0;
  }
  const wide = (text.match(WIDE) ?? []).length;
  return wide + Math.ceil((text.length - wide) / 4);
}

/** The message-count floor after this look at the page (it never goes down). */
export function nextFloor(floor, visibleMessages, maxTurnIndex) {
  return Math.max(floor ?? 0, visibleMessages, maxTurnIndex ?? 0);
}

/**
 * `turns`: the visible [{role, text}]; `floor`: the persisted floor (already updated with this
 * look). Returns {messages, hiddenMessages, tokens, ratio}.
 */
export function pressure(turns, floor, options) {
  const visible = turns.filter((turn) => turn.role === "user" || turn.role === "assistant");
  const visibleTokens = visible.reduce((sum, turn) => sum + estimateTokens(turn.text), 0);
  const messages = Math.max(floor, visible.length);
  const hiddenMessages = messages - visible.length;
  const average = visible.length > 0 ? visibleTokens / visible.length : 0;
  const tokens = Math.round(visibleTokens + hiddenMessages * average + options.rolloverReserveTokens);
  return { messages, hiddenMessages, tokens, ratio: tokens / options.rolloverContextTokens };
}

/**
 * Whether to roll over now: `{go, blocked}` where `blocked` lists every precondition that fails
 * (empty when `go`). `state`: {ratio, messages, auto, working, generating, card, draft,
 * uncertain, handoffBusy}.
 */
export function decide(state, options) {
  const blocked = [];
  if (!options.rolloverAuto) {
    blocked.push("rollover_off");
  }
  if (!(state.ratio >= options.rolloverThreshold)) {
    blocked.push("pressure_low");
  }
  const checks = [
    [!(state.messages >= MIN_MESSAGES), "too_short"],
    [!state.auto, "auto_off"],
    [state.working, "workspace_working"],
    [state.generating, "streaming"],
    [state.card, "card_pending"],
    [state.draft, "draft"],
    [state.uncertain, "send_uncertain"],
    [state.handoffBusy, "handoff_in_progress"],
  ];
  for (const [failed, reason] of checks) {
    if (failed) {
      blocked.push(reason);
    }
  }
  return { go: blocked.length === 0, blocked };
}

/**
 * Page health spent its recovery budget on a conversation (`health:<conv key>` episode state
 * `rollover_recommended`, content/page-health.js): roll over by itself when the rollover option
 * and every precondition of `decide` hold, except the context estimate: the page's failure is the
 * reason. `state` as `decide`'s, plus `recommended` (the durable record says so) and
 * `alreadyStarted` (this episode already started one). `{go, blocked}`.
 */
export function decideRecommended(state, options) {
  const { blocked } = decide({ ...state, ratio: Infinity }, options);
  if (!state.recommended) {
    blocked.push("not_recommended");
  }
  if (state.alreadyStarted) {
    blocked.push("already_started");
  }
  return { go: blocked.length === 0, blocked };
}
