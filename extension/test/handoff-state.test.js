import assert from "node:assert/strict";
import { test } from "node:test";

import {
  HandoffError,
  afterRestart,
  canStart,
  controlLost,
  done,
  handoffOptions,
  migrateQueue,
  observed,
  opened,
  pastedSeen,
  prepared,
  refused,
  reopen,
  seeding,
  start,
  transferId,
  view,
} from "../src/lib/handoff-state.js";
import { pageScope } from "../src/lib/scope.js";

const SOURCE_URL = "https://chatgpt.com/g/g-p-abc/c/conv-1";
const page = pageScope(SOURCE_URL);
const MARKER = "[herdr-handoff transfer=tr-1 continuity=cont_1]";
const ANSWER = { package: { message: `${MARKER}\nContinue the work.` }, workspace_id: "w1", seed_marker: MARKER };

function begun(now = 1) {
  return start(null, { page, sourceUrl: SOURCE_URL, auto: true, now, id: "tr-1" });
}

function seeded() {
  return seeding(opened(prepared(begun(), ANSWER, 2), 7, 3), 4);
}

test("success: prepared, opened, seeded, both id and marker seen -> confirmed -> done", () => {
  const record = begun();
  assert.equal(record.phase, "preparing");
  assert.equal(record.sourceConvKey, "conv-1");
  assert.equal(record.scope, "chatgpt:project:g-p-abc");
  assert.equal(record.auto, true);
  const confirmed = observed(seeded(), { convKey: "conv-2", markerSeen: true }, 5);
  assert.equal(confirmed.phase, "confirmed");
  assert.equal(confirmed.targetConvKey, "conv-2");
  assert.equal(confirmed.targetTabId, 7);
  assert.equal(confirmed.attempts, 1);
  assert.equal(done(confirmed, 6).phase, "done");
  assert.ok(canStart(done(confirmed, 6)));
});

test("an id without the marker, or the marker without a new id, is seed_uncertain, never confirmed", () => {
  const noMarker = observed(seeded(), { convKey: "conv-2", markerSeen: false }, 5);
  assert.equal(noMarker.phase, "seed_uncertain");
  assert.equal(noMarker.targetConvKey, "conv-2", "the id that did appear is kept for the probe");
  assert.equal(view(noMarker).copyPrompt, null, "no copy prompt while uncertain");
  assert.equal(view(noMarker).resumable, true);
  const noId = observed(seeded(), { convKey: null, markerSeen: true }, 5);
  assert.equal(noId.phase, "seed_uncertain");
  const sameConv = observed(seeded(), { convKey: "conv-1", markerSeen: true }, 5);
  assert.equal(sameConv.phase, "seed_uncertain", "the source conversation is not a target");
  assert.equal(canStart(noMarker), false, "an uncertain transfer blocks a second one");
});

test("resume: a later probe that finds the marker confirms; an absent one may seed again", () => {
  const uncertain = observed(seeded(), { convKey: "conv-2", markerSeen: false }, 5);
  const later = observed(uncertain, { convKey: "conv-2", markerSeen: true }, 9);
  assert.equal(later.phase, "confirmed");
  assert.equal(later.targetConvKey, "conv-2");
  const again = seeding(uncertain, 9);
  assert.equal(again.phase, "seeding");
  assert.equal(again.attempts, 2);
  assert.equal(again.targetConvKey, "conv-2");
});

test("control lost before anything was typed is unavailable with the copy prompt; after, uncertain", () => {
  const opening = prepared(begun(), ANSWER, 2);
  const lost = controlLost(opening, { code: "handoff_tab_unreachable", message: "no content script" }, 3);
  assert.equal(lost.phase, "unavailable");
  assert.equal(view(lost).copyPrompt, ANSWER.package.message);
  assert.ok(canStart(lost));
  const midSeed = controlLost(seeded(), { code: "handoff_tab_closed", message: "closed" }, 5);
  assert.equal(midSeed.phase, "seed_uncertain");
  assert.equal(view(midSeed).copyPrompt, null);
  const nothingTyped = controlLost(seeded(), { code: "handoff_page_busy", message: "busy" }, 5, { notTyped: true });
  assert.equal(nothingTyped.phase, "unavailable", "the one page that had the seed typed nothing");
  const uncertain = observed(seeded(), { convKey: null, markerSeen: false }, 5);
  const secondTry = seeding(uncertain, 6);
  assert.equal(
    controlLost(secondTry, { code: "handoff_page_busy", message: "busy" }, 7, { notTyped: true }).phase,
    "seed_uncertain",
    "an earlier attempt may have landed: still uncertain",
  );
  const reopened = reopen(uncertain, 6);
  assert.equal(reopened.phase, "opening");
  assert.equal(controlLost(reopened, { code: "handoff_tab_unreachable", message: "x" }, 7).phase, "seed_uncertain");
});

test("a refusal of the runtime ends the transfer with its code", () => {
  const record = refused(begun(), { code: "workspace_working", message: "coder works" }, 2);
  assert.equal(record.phase, "refused");
  assert.deepEqual(record.error, { code: "workspace_working", message: "coder works" });
  assert.ok(canStart(record));
});

test("start refuses a page without a conversation and a second transfer in flight", () => {
  assert.throws(
    () => start(null, { page: pageScope("https://chatgpt.com/g/g-p-abc/project"), sourceUrl: null, now: 1 }),
    (error) => error instanceof HandoffError && error.code === "handoff_no_conversation",
  );
  assert.throws(
    () => start(begun(), { page, sourceUrl: SOURCE_URL, now: 2 }),
    (error) => error.code === "handoff_in_progress",
  );
});

test("steps out of order are refused, and a package without its marker first is invalid", () => {
  assert.throws(() => observed(begun(), { convKey: "x", markerSeen: true }, 2), (error) => error.code === "handoff_state");
  assert.throws(() => done(seeded(), 5), (error) => error.code === "handoff_state");
  assert.throws(
    () => prepared(begun(), { package: { message: "no marker" }, seed_marker: MARKER }, 2),
    (error) => error.code === "handoff_package_invalid",
  );
});

test("after a restart: seeding is uncertain, opening opens again, the rest stays", () => {
  assert.equal(afterRestart(seeded(), 9).phase, "seed_uncertain");
  const opening = opened(prepared(begun(), ANSWER, 2), 7, 3);
  assert.equal(afterRestart(opening, 9).phase, "opening");
  assert.equal(afterRestart(opening, 9).targetTabId, null);
  const confirmed = observed(seeded(), { convKey: "conv-2", markerSeen: true }, 5);
  assert.equal(afterRestart(confirmed, 9), confirmed);
});

test("the queue migrates in order after the target's own entries, without duplicates", () => {
  const source = [{ id: "a", text: "one" }, { id: "b", text: "two" }];
  const target = [{ id: "t", text: "zero" }];
  assert.deepEqual(migrateQueue(target, source).map((entry) => entry.text), ["zero", "one", "two"]);
  assert.deepEqual(migrateQueue(migrateQueue([], source), source).map((entry) => entry.id), ["a", "b"]);
});

test("options are bounded; transfer ids are unique-looking and valid for the runtime", () => {
  assert.deepEqual(handoffOptions({}), { seedDeadlineSec: 60, connectDeadlineSec: 20 });
  assert.deepEqual(handoffOptions({ handoffSeedDeadlineSec: 5, handoffConnectDeadlineSec: 0 }), {
    seedDeadlineSec: 5,
    connectDeadlineSec: 20,
  });
  const id = transferId(1_700_000_000_000, () => 0.5);
  assert.match(id, /^tr-[a-z0-9]+-[a-z0-9]{8}$/);
});

test("a pasted copy prompt seen in a new conversation cuts over like a seed", () => {
  const lost = controlLost(prepared(begun(), ANSWER, 2), { code: "handoff_page_unreachable", message: "x" }, 3);
  const pasted = pastedSeen(lost, "conv-9", 4);
  assert.equal(pasted.phase, "confirmed");
  assert.equal(pasted.targetConvKey, "conv-9");
  assert.equal(pastedSeen(lost, "conv-1", 4), lost, "the source itself is no target");
  assert.throws(() => pastedSeen(seeded(), "conv-9", 4), (error) => error.code === "handoff_state");
});
