import assert from "node:assert/strict";
import { test } from "node:test";

import { allowOnceIndex, classifyCard } from "../src/lib/tool-card.js";

const catalog = { connector: "Herdr", tools: ["herdr_prompt", "herdr_fs_edit", "herdr_status"] };

test("our connector's card naming one tool of the catalog is ours, in English or Chinese", () => {
  const english = { labels: ["Herdr", "herdr_prompt", "Herdr wants to run this tool"], images: [], buttons: ["Deny", "Always allow", "Allow"] };
  assert.deepEqual(classifyCard(english, catalog), { ours: true, tool: "herdr_prompt", allow: 2 });
  const chinese = { labels: ["herdr_fs_edit"], images: ["Herdr"], buttons: ["拒绝", "始终允许", "允许"] };
  assert.deepEqual(classifyCard(chinese, catalog), { ours: true, tool: "herdr_fs_edit", allow: 2 });
  assert.equal(classifyCard({ ...english, buttons: ["Deny", "Allow once"] }, catalog).allow, 1, "the earlier label");
});

test("anything else is left alone", () => {
  const cases = [
    [{ labels: ["GitHub", "create_issue"], images: [], buttons: ["Deny", "Allow"] }, "the card does not name this connector"],
    [{ labels: ["GitHub", "herdr_prompt"], images: [], buttons: ["Deny", "Allow"] }, "the card does not name this connector"],
    [{ labels: ["Herdr", "delete_everything"], images: [], buttons: ["Deny", "Allow"] }, "the card names no tool of the catalog"],
    [{ labels: ["Herdr", "herdr_prompt", "herdr_fs_edit"], images: [], buttons: ["Allow"] }, "the card names several tools"],
    [{ labels: ["Herdr", "herdr_prompt"], images: [], buttons: ["Deny", "Always allow"] }, "no Allow button on the card"],
    [{ labels: ["Herdr Tools", "herdr_prompt"], images: [], buttons: ["Allow"] }, "the card does not name this connector"],
  ];
  for (const [card, reason] of cases) {
    assert.deepEqual(classifyCard(card, catalog), { ours: false, reason }, JSON.stringify(card));
  }
  const card = { labels: ["Herdr", "herdr_prompt"], buttons: ["Allow"] };
  assert.equal(classifyCard(card, { connector: "", tools: catalog.tools }).ours, false);
  assert.equal(classifyCard(card, { connector: "Herdr", tools: [] }).ours, false);
});

test("Always allow is never the accept-once button", () => {
  assert.equal(allowOnceIndex(["Always allow", "始终允许"]), -1);
  assert.equal(allowOnceIndex([" Allow\n"]), 0);
});
