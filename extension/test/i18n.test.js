import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { format, t, useCatalog } from "../src/lib/i18n.js";
import { MARK, checkText, continueText, fallbackText, progressText, wakeText } from "../src/lib/messages.js";

const ROOT = new URL("..", import.meta.url).pathname;
const catalog = (locale) => JSON.parse(readFileSync(join(ROOT, "_locales", locale, "messages.json"), "utf8"));
const EN = catalog("en");
const ZH = catalog("zh_CN");

function sources(dir) {
  return readdirSync(join(ROOT, dir), { recursive: true })
    .filter((name) => /\.(js|html)$/.test(name))
    .map((name) => readFileSync(join(ROOT, dir, name), "utf8"))
    .join("\n");
}

test("both catalogs hold the same names with the same placeholders", () => {
  assert.deepEqual(Object.keys(ZH).sort(), Object.keys(EN).sort());
  for (const [name, entry] of Object.entries(EN)) {
    const named = (text) => [...text.matchAll(/\$([a-z]+)\$/gi)].map((match) => match[1].toLowerCase()).sort();
    assert.deepEqual(named(ZH[name].message), named(entry.message), name);
    assert.deepEqual(Object.keys(ZH[name].placeholders ?? {}).sort(), Object.keys(entry.placeholders ?? {}).sort(), name);
    assert.ok(entry.description, `${name} says where it is shown`);
  }
});

test("every name the code and pages ask for is in the catalog; manifest names too", () => {
  const code = sources("src");
  const asked = new Set([
    ...[...code.matchAll(/\bt\("([A-Za-z0-9_]+)"/g)].map((match) => match[1]),
    ...[...code.matchAll(/data-i18n(?:-title|-aria-label)?="([A-Za-z0-9_]+)"/g)].map((match) => match[1]),
    ...[...code.matchAll(/: "(hud[A-Za-z]+|status[A-Za-z]+|panelPage[A-Za-z]+)"/g)].map((match) => match[1]),
    ...[...readFileSync(join(ROOT, "manifest.json"), "utf8").matchAll(/__MSG_([A-Za-z0-9_]+)__/g)].map((match) => match[1]),
  ]);
  assert.ok(asked.size > 100, `found ${asked.size} names`);
  for (const name of asked) {
    assert.ok(EN[name], `${name} is missing from _locales/en`);
  }
});

test("the Chinese catalog is Chinese, keeps the product's words, and no English sentence slipped in", () => {
  // Names and product words Chinese developers use as they are ("Agent", "pane", "Workspace").
  const kept = new Set(["htmlLang", "panelConnecting", "panelWorkspace", "ccAgent", "ccDescribeAgent", "ccDescribeAgentKind", "ccTargetAgent", "ccTargetPane"]);
  for (const [name, entry] of Object.entries(ZH)) {
    if (!kept.has(name)) {
      assert.match(entry.message, /[\u4e00-\u9fff]/, `${name} has no Chinese: ${entry.message}`);
    }
  }
  assert.equal(ZH.hudCheck.message, "查 Herdr");
  assert.equal(ZH.hudAutoOn.message, "自动：开");
  assert.equal(ZH.hudHandoff.message, "接力");
});

test("format substitutes as Chrome does: named placeholders, $1..$9, $$", () => {
  const entry = { message: "Cost $amount$$$ for $who$", placeholders: { amount: { content: "$1" }, who: { content: "$2" } } };
  assert.equal(format(entry, ["3", "Ann"]), "Cost 3$ for Ann");
  assert.equal(format({ message: "no placeholders" }, ["x"]), "no placeholders");
});

test("the HUD's words carry no internal names (conv, seed_uncertain, seed marker, storage keys)", () => {
  for (const catalogue of [EN, ZH]) {
    for (const name of Object.keys(catalogue).filter((key) => /^(hud|kind|panel|opt|note)/.test(key))) {
      const text = catalogue[name].message;
      assert.doesNotMatch(text, /\bconv\b|seed_uncertain|seed marker|progressTickSec|progressFallbackSec|rollover[A-Z]|stale(After|d)/, `${name}: ${text}`);
    }
  }
});

test("English texts typed into a conversation are the ones the tests and the model knew", () => {
  useCatalog(EN);
  try {
    const wake = wakeText({ label: "api", workspaceId: "w1", agents: [{ agent: "coder", status: "done" }], inbox: [{ task_id: "t1", outcome: "completed" }] });
    assert.equal(
      wake,
      '[herdr-mcp] No agent in workspace "api" (w1) is working any more.\nAgents now: coder done.\nTask t1: completed.\n' +
        "This is a signal to re-inspect, not a result: read the live Herdr state, the agents' output, Git and the tests before deciding the next step.",
    );
    assert.equal(progressText({ label: "api", summary: "line" }), "[herdr-mcp] progress in api (agents still working; no action needed yet):\nline");
    assert.equal(fallbackText({ workspaceId: "w1", quietSec: 600 }), "[herdr-mcp] workspace w1 is still working; no new output in the last 600 s.");
    assert.equal(
      continueText({ label: "api", workspaceId: "w1" }),
      "[herdr-mcp] Continue: re-inspect api's live state (agents, output, Git, tests) and go on with the next step.",
    );
  } finally {
    useCatalog(null);
  }
});

test("Continue on a page bound to nothing names no workspace", () => {
  useCatalog(EN);
  try {
    const text = continueText({});
    assert.equal(text, "[herdr-mcp] Continue: go on with the next step.");
    assert.doesNotMatch(text, /bound workspace|undefined/);
    assert.ok(continueText({ bridged: true }).endsWith('one {"tool": ..., "args": {...}} object per call.'));
  } finally {
    useCatalog(null);
  }
});

test("Check Herdr's text: the live state, the inbox, and the ask to look; protocol words unchanged in Chinese", () => {
  const workspace = { workspace_id: "w1", working: true, agents: [{ agent: "coder", status: "working" }, { agent: "reviewer", status: "idle" }] };
  useCatalog(EN);
  try {
    const text = checkText({ label: "api", workspaceId: "w1", workspace, inbox: [{ task_id: "t9", outcome: "failed" }] });
    assert.deepEqual(text.split("\n"), [
      `${MARK} Herdr's live state of workspace "api" (w1), read just now:`,
      "An agent is working.",
      "Agents now: coder working, reviewer idle.",
      "Task t9: failed.",
      "This is a signal to re-inspect, not a result: read the live Herdr state, the agents' output, Git and the tests before deciding the next step.",
    ]);
    assert.match(checkText({ label: "api", workspaceId: "w1", workspace: null }), /does not list this workspace/);
  } finally {
    useCatalog(null);
  }
  useCatalog(ZH);
  try {
    const text = checkText({ label: "api", workspaceId: "w1", workspace, inbox: [{ task_id: "t9", outcome: "failed" }], bridged: true });
    const lines = text.split("\n");
    assert.equal(lines[0], `${MARK} 刚刚读取的 workspace "api" (w1) 的 Herdr 实时状态：`);
    assert.equal(lines[2], "Agent 当前状态：coder working, reviewer idle。", "agent names and Herdr's statuses stay as they are");
    assert.equal(lines[3], "任务 t9：failed。", "task ids and outcome codes stay as they are");
    assert.match(lines.at(-1), /^Use the Herdr tools as the protocol prompt says/, "the bridge's call form stays in the protocol's language");
    assert.ok(wakeText({ label: "api", workspaceId: "w1" }).startsWith(`${MARK} workspace "api" (w1) 里已经没有 Agent 在工作了。`));
    assert.equal(t("hudQueue", 2), "排队（2）");
  } finally {
    useCatalog(null);
  }
});
