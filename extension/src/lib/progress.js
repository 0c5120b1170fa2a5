// Progress (docs/browser-protocol.md section 5): every progressTickSec look at the new non-empty
// output of the bound workspace's agents; send only when there is some and its summary differs
// from the last one sent; after progressFallbackSec without a send, one fallback status. Pure:
// the worker persists the state (chrome.storage.local) so a restarted worker does not resend.

export const DEFAULT_OPTIONS = Object.freeze({ progressTickSec: 60, progressFallbackSec: 600 });
export const SUMMARY_CHARS = 600;

export function initialProgress() {
  return { pending: "", lastSummary: null, lastSentAt: 0, since: null, outputs: 0, checked: 0 };
}

/** A control sequence or carriage return left in captured terminal output. */
// eslint-disable-next-line no-control-regex
const TERMINAL_NOISE = /\u001b\[[0-9;?]*[A-Za-z]|\r/g;

/** The summary a piece of new output gives: its newest SUMMARY_CHARS, whole lines where possible. */
export function summarize(text) {
  const lines = String(text)
    .replace(TERMINAL_NOISE, "")
    .split("\n")
    .map((line) => line.trimEnd())
    .filter((line) => line.trim() !== "");
  const kept = [];
  let length = 0;
  for (const line of lines.reverse()) {
    if (length + line.length + 1 > SUMMARY_CHARS) {
      if (kept.length === 0) {
        kept.push(line.slice(line.length - SUMMARY_CHARS));
      }
      break;
    }
    kept.push(line);
    length += line.length + 1;
  }
  return kept.reverse().join("\n");
}

/**
 * New output arrived (agent_output of the bound workspace): kept until the next tick. `outputs`
 * counts the outputs taken and `checked` is that count at the last tick, so the HUD (and a
 * test) can tell that a piece of output was looked at even when it sent nothing.
 */
export function addOutput(state, text) {
  const pending = `${state.pending}${state.pending && !state.pending.endsWith("\n") ? "\n" : ""}${text}`;
  // Only the newest output can be summarised, so keep a bounded tail.
  return { ...state, pending: pending.slice(-4 * SUMMARY_CHARS), outputs: (state.outputs ?? 0) + 1 };
}

/** The workspace started working at `now`: the fallback clock starts. */
export function startTurn(state, now) {
  return { ...state, pending: "", since: now };
}

/**
 * One tick at `now` while the workspace works. Returns `{state, send}`: `send` is null, or
 * `{kind: "progress", summary}` or `{kind: "fallback", quietSec}`.
 */
export function tick(current, now, options = DEFAULT_OPTIONS) {
  const state = { ...current, checked: current.outputs ?? 0 };
  const summary = summarize(state.pending);
  if (summary) {
    const next = { ...state, pending: "" };
    if (summary === state.lastSummary) {
      return { state: next, send: null };
    }
    return { state: { ...next, lastSummary: summary, lastSentAt: now }, send: { kind: "progress", summary } };
  }
  if (state.since === null) {
    return { state: { ...state, pending: "" }, send: null }; // no turn started: nothing to report on
  }
  const quietSince = Math.max(state.lastSentAt, state.since);
  if (now - quietSince >= options.progressFallbackSec * 1000) {
    return {
      state: { ...state, pending: "", lastSentAt: now },
      send: { kind: "fallback", quietSec: Math.round((now - quietSince) / 1000) },
    };
  }
  return { state: { ...state, pending: "" }, send: null };
}

/** Options read from storage, made sane: whole seconds, a tick of at least 1 s. */
export function normalizeOptions(raw) {
  const pick = (value, fallback, min) => {
    const number = Number(value);
    return Number.isFinite(number) && number >= min ? Math.round(number) : fallback;
  };
  return {
    progressTickSec: pick(raw?.progressTickSec, DEFAULT_OPTIONS.progressTickSec, 1),
    progressFallbackSec: pick(raw?.progressFallbackSec, DEFAULT_OPTIONS.progressFallbackSec, 1),
  };
}
