// HTTP 429 from the site: pause sending 30 s, then 60 s, then 120 s (cap); never a retry storm,
// never a reload. Pure state transitions; the worker persists the state in chrome.storage.local.

export const BACKOFF_STEPS_MS = Object.freeze([30_000, 60_000, 120_000]);

export function initialBackoff() {
  return { level: 0, pausedUntil: 0, last429At: 0 };
}

/**
 * A 429 was seen at `now`. 429s seen while already paused (the page's own requests answered in
 * the same burst) do not escalate: one pause per burst. The next 429 after a pause ended
 * escalates one step, up to the cap.
 */
export function on429(state, now) {
  if (now < state.pausedUntil) {
    return { ...state, last429At: now };
  }
  const step = BACKOFF_STEPS_MS[Math.min(state.level, BACKOFF_STEPS_MS.length - 1)];
  return { level: Math.min(state.level + 1, BACKOFF_STEPS_MS.length), pausedUntil: now + step, last429At: now };
}

/** A send was confirmed at `now` after the pause: the ladder starts again from 30 s. */
export function onConfirmedSend(state, now) {
  if (now < state.pausedUntil || state.level === 0) {
    return state;
  }
  return { ...state, level: 0 };
}

export function isPaused(state, now) {
  return now < state.pausedUntil;
}

export function remainingMs(state, now) {
  return Math.max(0, state.pausedUntil - now);
}
