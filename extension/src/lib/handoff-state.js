// The handoff state machine (seed 000, "handoff 的 fail-closed 流程"): one transfer of a scope's
// conversation to a new conversation in the same scope. Pure: the worker (background/handoff.js)
// persists each record under `handoff:<source scope>` in chrome.storage.local and does the I/O.
//
// Phases, in order:
//   preparing   the runtime is asked for the package (/browser/handoff.prepare)
//   opening     a new conversation page is being opened; its content script has not been asked
//               to type anything yet (nothing can have been sent)
//   seeding     the seed was handed to the new page's content script: from here on the seed may
//               have been submitted, so no failure can be "nothing happened"
//   confirmed   the new conversation id AND the seed marker were seen on the page; the cutover
//               (binding / active_conv_key, Auto, queue) is being applied (idempotent steps)
//   done        cut over
// and the three ends that are not success:
//   seed_uncertain  the seed may or may not be there (marker not seen before the deadline, the
//                   page went away, the worker restarted mid-seed): the source stays the active
//                   conversation; "Resume handoff" probes the target and cuts over only when the
//                   marker is found there (sends the seed again only when it is confirmed absent)
//   unavailable     browser control is confirmed unavailable before anything was typed (the tab
//                   could not be opened, its content script never answered, or its composer was
//                   never usable): the copy prompt (the package's manual_delivery) is offered
//   refused         the runtime refused to prepare (workspace_working, continuity_not_found, ...)
//                   or the page cannot hand off; nothing was opened
//
// The copy prompt is offered only in `unavailable`: never while the outcome is uncertain, so a
// person never starts a second conversation from a seed that may already have landed.

export const PHASES = Object.freeze(["preparing", "opening", "seeding", "confirmed", "done", "seed_uncertain", "unavailable", "refused"]);
/** Phases during which the source conversation's automatic sends (queue, wakes, progress) wait. */
export const IN_FLIGHT = Object.freeze(["preparing", "opening", "seeding", "confirmed"]);
/** Phases that end a transfer for good: a new Hand off may start. */
export const FINISHED = Object.freeze(["done", "unavailable", "refused"]);

export const DEFAULTS = Object.freeze({
  /** How long the new page may take to show the new conversation id and the seed marker. */
  seedDeadlineSec: 60,
  /** How long a newly opened page's content script may take to connect. */
  connectDeadlineSec: 20,
});

export class HandoffError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

export function handoffOptions(raw) {
  const pick = (value, fallback, low, high) =>
    Number.isFinite(value) && value >= low && value <= high ? value : fallback;
  return {
    seedDeadlineSec: pick(raw?.handoffSeedDeadlineSec, DEFAULTS.seedDeadlineSec, 1, 600),
    connectDeadlineSec: pick(raw?.handoffConnectDeadlineSec, DEFAULTS.connectDeadlineSec, 1, 300),
  };
}

export function transferId(now, random = Math.random) {
  return `tr-${now.toString(36)}-${Math.floor(random() * 36 ** 8).toString(36).padStart(8, "0")}`;
}

/** Whether a new transfer may start for a scope whose current record is `existing`. */
export function canStart(existing) {
  return !existing || FINISHED.includes(existing.phase);
}

/**
 * A new transfer from `page` (lib/scope.js pageScope of the source). Throws HandoffError
 * `handoff_no_conversation` (not a concrete conversation) or `handoff_in_progress`.
 */
export function start(existing, { page, sourceUrl, auto, now, id = transferId(now) }) {
  if (!page || !page.convKey || !sourceUrl || page.kind === "root") {
    throw new HandoffError("handoff_no_conversation", "Hand off starts from a conversation page.");
  }
  if (!canStart(existing)) {
    throw new HandoffError("handoff_in_progress", "A handoff of this conversation is already under way.");
  }
  return {
    transferId: id,
    scope: page.scope,
    site: page.site,
    kind: page.kind,
    projectId: page.projectId ?? null,
    sourceConvKey: page.convKey,
    sourceUrl,
    auto: Boolean(auto),
    phase: "preparing",
    message: null,
    marker: null,
    workspaceId: null,
    targetTabId: null,
    targetConvKey: null,
    error: null,
    attempts: 0,
    startedAt: now,
    updatedAt: now,
  };
}

function move(record, phase, now, changes = {}) {
  return { ...record, ...changes, phase, updatedAt: now };
}

/** The runtime's package arrived (`{package, workspace_id, seed_marker}`). */
export function prepared(record, answer, now) {
  expect(record, ["preparing"]);
  const message = answer.package.message;
  const marker = answer.seed_marker;
  if (typeof message !== "string" || typeof marker !== "string" || !message.startsWith(marker)) {
    throw new HandoffError("handoff_package_invalid", "The runtime's package has no seed marker on its first line.");
  }
  return move(record, "opening", now, {
    message,
    marker,
    continuityId: answer.package.continuity_id ?? null,
    workspaceId: answer.workspace_id ?? null,
  });
}

/** The runtime (or a check before it) refused: nothing was opened. */
export function refused(record, error, now) {
  expect(record, ["preparing"]);
  return move(record, "refused", now, { error: { code: error.code ?? "failed", message: error.message } });
}

/** The new page was opened in tab `tabId` (its content script not asked anything yet). */
export function opened(record, tabId, now) {
  expect(record, ["opening"]);
  return { ...record, targetTabId: tabId, updatedAt: now };
}

/** The seed is being handed to the new page: from now on it may have been submitted. */
export function seeding(record, now) {
  expect(record, ["opening", "seed_uncertain"]);
  return move(record, "seeding", now, { attempts: record.attempts + 1, error: null });
}

/**
 * Browser control failed. Before `seeding` nothing can have been typed: control is confirmed
 * unavailable and the copy prompt is offered. From `seeding` on, the seed may be on its way:
 * the transfer becomes `seed_uncertain` instead (never the copy prompt).
 */
export function controlLost(record, reason, now, { notTyped = false } = {}) {
  expect(record, ["opening", "seeding", "seed_uncertain"]);
  const error = { code: reason.code, message: reason.message };
  // Only while no seed was ever handed to a page (or the one page that had it says it typed
  // nothing) is "nothing was sent" certain.
  const neverSeeded = record.phase === "opening" && record.attempts === 0;
  const firstNotTyped = record.phase === "seeding" && record.attempts === 1 && notTyped;
  if (neverSeeded || firstNotTyped) {
    return move(record, "unavailable", now, { error });
  }
  return move(record, "seed_uncertain", now, { error });
}

/** Resume without a known target conversation: open a new page again (attempts are kept). */
export function reopen(record, now) {
  expect(record, ["seed_uncertain"]);
  return move(record, "opening", now, { targetTabId: null });
}

/**
 * What the page showed after the seed (or after a probe): `convKey` is the conversation the page
 * is on (null when it never left the new-chat page), `markerSeen` whether a user turn carries the
 * marker. Both -> `confirmed`; anything less -> `seed_uncertain`, remembering a conversation id
 * that did appear.
 */
export function observed(record, { convKey, markerSeen }, now) {
  expect(record, ["seeding", "seed_uncertain"]);
  const target = convKey && convKey !== record.sourceConvKey ? convKey : null;
  if (target && markerSeen) {
    return move(record, "confirmed", now, { targetConvKey: target, error: null });
  }
  return move(record, "seed_uncertain", now, {
    targetConvKey: target ?? record.targetConvKey,
    error: {
      code: "seed_uncertain",
      message: target
        ? "The new conversation does not show the seed marker yet."
        : "The new page never showed a new conversation with the seed.",
    },
  });
}

/**
 * The copy prompt was pasted by hand: a new conversation of the scope shows the marker in a user
 * turn. That is the same evidence as an automatic seed, so the transfer cuts over the same way.
 */
export function pastedSeen(record, convKey, now) {
  expect(record, ["unavailable"]);
  if (!convKey || convKey === record.sourceConvKey) {
    return record;
  }
  return move(record, "confirmed", now, { targetConvKey: convKey, error: null });
}

/** The cutover's steps are applied. */
export function done(record, now) {
  expect(record, ["confirmed"]);
  return move(record, "done", now);
}

/**
 * After a worker restart: a transfer caught preparing or opening starts those again (nothing was
 * typed; preparing again returns the same package); one caught seeding is uncertain.
 */
export function afterRestart(record, now) {
  if (record.phase === "seeding") {
    return move(record, "seed_uncertain", now, {
      error: { code: "seed_uncertain", message: "The extension restarted while the seed was being sent." },
    });
  }
  if (record.phase === "opening") {
    return move(record, "opening", now, { targetTabId: null });
  }
  return record;
}

/** What the source conversation's HUD shows of a transfer. */
export function view(record) {
  if (!record) {
    return null;
  }
  return {
    phase: record.phase,
    transferId: record.transferId,
    targetConvKey: record.targetConvKey,
    error: record.error,
    inFlight: IN_FLIGHT.includes(record.phase),
    resumable: record.phase === "seed_uncertain",
    copyPrompt: record.phase === "unavailable" ? record.message : null,
  };
}

/** The queue of the target after the cutover: its own entries, then the source's, in order. */
export function migrateQueue(target, source) {
  const seen = new Set(target.map((entry) => entry.id));
  return [...target, ...source.filter((entry) => !seen.has(entry.id))];
}

function expect(record, phases) {
  if (!record || !phases.includes(record.phase)) {
    throw new HandoffError(
      "handoff_state",
      `The handoff is ${record ? record.phase : "missing"}, not ${phases.join(" or ")}.`,
    );
  }
}
