// The worker's continuity (src/background/continuity.js) with the real parts around it: the
// bindings cache (bindings.js), the tab registries and their confirmed sends (tabs.js, TabGroup),
// the 429 pause (ratelimit.js), the store (store.js) over an in-memory chrome.storage.local
// (fake-chrome.js), and the English catalog. What stands in is the far ends only:
// - the native host with the runtime behind it, answering the /browser methods and
//   GET /push/state with the shapes docs/browser-protocol.md section 2 gives (binding.set keeps a
//   Project's active conversation as `/c/<id>`; a null workspace_id deletes);
// - each tab's content script on its port, answering a "send" with "sent" ok or
//   `reason: "unconfirmed"` and then reporting its composer at rest, as content/main.js does.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { beforeEach, test } from "node:test";

import { Bindings } from "../src/background/bindings.js";
import { Continuity, WAKE_INBOX_FRESH_MS } from "../src/background/continuity.js";
import { RateLimit } from "../src/background/ratelimit.js";
import { TabGroup, Tabs } from "../src/background/tabs.js";
import { CALL_FORM_HINT } from "../src/lib/bridge-protocol.js";
import { useCatalog } from "../src/lib/i18n.js";
import { installChrome } from "./fake-chrome.js";
import { FakePort } from "./fake-port.js";

useCatalog(JSON.parse(readFileSync(new URL("../_locales/en/messages.json", import.meta.url), "utf8")));

const CONV = "chatgpt:conv:c1";
const ZAI = "zai:conv:z1";

/** The native host and the runtime's /browser endpoints and /push/state behind it. */
class FakeRuntime {
  constructor() {
    this.connected = true;
    this.bindings = new Map();
    this.workspaces = [{ workspace_id: "w1", label: "api", working: false, agents: [] }];
    this.inbox = new Map();
    this.seq = 100;
    this.calls = [];
    this.onAck = () => {};
  }

  bind(scope, workspaceId, { label = "api", activeConvKey = null } = {}) {
    this.bindings.set(scope, { scope, workspace_id: workspaceId, label, active_conv_key: activeConvKey, created_at: 1, updated_at: 1 });
  }

  async call(path, body) {
    this.calls.push({ path, body });
    switch (path) {
      case "/browser/binding.list":
        return { bindings: [...this.bindings.values()].map((binding) => ({ ...binding })) };
      case "/browser/binding.set": {
        if (body.workspace_id === null) {
          return { binding: null, deleted: this.bindings.delete(body.scope) };
        }
        this.bind(body.scope, body.workspace_id, { label: body.label ?? null, activeConvKey: body.active_conv_key ?? null });
        return { binding: { ...this.bindings.get(body.scope) } };
      }
      case "/browser/inbox.read":
        return { items: [...(this.inbox.get(body.scope) ?? [])] };
      case "/browser/inbox.ack": {
        this.onAck(body);
        const before = this.inbox.get(body.scope) ?? [];
        const kept = before.filter((item) => !body.inbox_ids.includes(item.inbox_id));
        this.inbox.set(body.scope, kept);
        return { acked: before.length - kept.length };
      }
      default:
        throw Object.assign(new Error(`no method ${path}`), { code: "unknown_method" });
    }
  }

  async request(method, path) {
    this.calls.push({ path: `${method} ${path}` });
    assert.deepEqual([method, path], ["GET", "/push/state"]);
    return { seq: this.seq, workspaces: structuredClone(this.workspaces) };
  }

  paths() {
    return this.calls.map((call) => call.path);
  }
}

/** A tab's content script at the other end of its port. */
class FakePage extends FakePort {
  constructor(tabId) {
    super();
    this.sender = { tab: { id: tabId } };
    this.outcome = { ok: true };
    this.sent = [];
  }

  postMessage(frame) {
    super.postMessage(frame);
    if (frame.type === "send") {
      this.sent.push(frame.text);
      const answer = { type: "sent", id: frame.id, ...this.outcome };
      setImmediate(() => {
        this.deliver(answer);
        this.deliver({ type: "composer", idle: true });
      });
    }
  }

  disconnect() {
    this.drop();
  }

  of(type) {
    return this.posted.filter((frame) => frame.type === type);
  }
}

let storage;
let runtime;
let bindings;
let chat;
let bridged;
let rateLimit;
let continuity;
let clock;
let warnings;

beforeEach(() => {
  storage = installChrome({ openTabs: [8] });
  runtime = new FakeRuntime();
  warnings = [];
  const log = { warn: (...parts) => warnings.push(parts.join(" ")) };
  bindings = new Bindings(runtime, log);
  chat = new Tabs({ onPage() {}, onIdle() {}, onMessage() {}, log });
  bridged = new Tabs({ onPage() {}, onIdle() {}, onMessage() {}, log });
  clock = 1_000_000;
  rateLimit = new RateLimit({ now: () => clock });
  continuity = new Continuity({ native: runtime, bindings, tabs: new TabGroup([chat, bridged]), rateLimit, now: () => clock, log });
});

/** A connected tab showing `url`, at rest unless told otherwise. */
function open(registry, tabId, url, idle = true) {
  const page = new FakePage(tabId);
  registry.attach(page);
  page.deliver({ type: "page", url, idle });
  return page;
}

async function bound(...entries) {
  for (const [scope, workspaceId, extra] of entries) {
    runtime.bind(scope, workspaceId, extra);
  }
  await bindings.refresh();
}

/** Whatever pumps are under way for `convKey` have finished. */
async function pumped(convKey) {
  let last;
  while (continuity.pumping.get(convKey) !== last) {
    last = continuity.pumping.get(convKey);
    await last;
  }
}

const working = (seq) => continuity.handle("agent_working", { seq, workspace_id: "w1", pane_id: "w1:p1", agent: "coder", at: seq });
const settled = (seq, stillWorking = false) =>
  continuity.handle("agent_settled", { seq, workspace_id: "w1", pane_id: "w1:p1", agent: "coder", status: "done", workspace_working: stillWorking, at: seq });
const output = (text) => continuity.handle("agent_output", { seq: 0, workspace_id: "w1", pane_id: "w1:p1", agent: "coder", text, truncated: false, at: 0 });

test("a turn that ends wakes each bound scope once; with Auto off the wake waits for Continue", async () => {
  await bound([CONV, "w1"]);
  const page = open(chat, 1, "https://chatgpt.com/c/c1");
  await working(101);
  await settled(102, true); // another pane still works: progress, not a wake
  assert.equal(storage.get(`wake:${CONV}`), undefined);
  await settled(103);
  assert.deepEqual(storage.get(`wake:${CONV}`).pending, { turn: "w101", at: clock, seq: 103 });
  assert.equal(continuity.notes.get(CONV).line, "agents stopped: a wake is waiting");
  await pumped("c1");
  assert.deepEqual(page.sent, [], "Auto is off: nothing is sent by itself");

  await settled(104); // the same turn again (a replay): no second wake
  assert.deepEqual(storage.get(`wake:${CONV}`).pending, { turn: "w101", at: clock, seq: 103 });

  assert.equal(await continuity.pump("c1", { manual: true }), "wake");
  assert.equal(page.sent.length, 1);
  assert.equal(page.sent[0].split("\n")[0], '[herdr-mcp] No agent in workspace "api" (w1) is working any more.');
  assert.match(page.sent[0], /This is a signal to re-inspect, not a result/);
  assert.deepEqual(storage.get(`wake:${CONV}`), { wokenTurn: "w101", wokenSeq: 103, pending: null });
  await settled(105);
  assert.equal(storage.get(`wake:${CONV}`).pending, null, "a woken turn never wakes again");

  await working(106);
  await settled(107);
  assert.equal(storage.get(`wake:${CONV}`).pending.turn, "w106", "the next turn wakes again");
  assert.equal(await continuity.pump("c1"), "nothing", "still waiting for Continue");
  assert.deepEqual(warnings, []);
});

test("with Auto on the wake goes out by itself with the task inbox, acknowledged only once the send is confirmed", async () => {
  await bound([CONV, "w1"]);
  storage.set(`auto:${CONV}`, true);
  runtime.inbox.set(CONV, [{ inbox_id: 7, task_id: "t-1", outcome: "done" }]);
  const page = open(chat, 1, "https://chatgpt.com/c/c1");
  page.outcome = { ok: false, reason: "unconfirmed" };
  await working(101);
  await settled(102);
  await pumped("c1");
  assert.equal(page.sent.length, 1, "the wake was typed");
  assert.equal(storage.get(`uncertain:c1`), true, "not confirmed: nothing automatic until the person looks");
  assert.ok(storage.get(`wake:${CONV}`).pending, "the wake is still pending");
  assert.equal(runtime.paths().includes("/browser/inbox.ack"), false, "nothing acknowledged for an unconfirmed send");
  assert.equal(continuity.notes.get(CONV).line, "a message was not confirmed as sent: automation paused");

  assert.equal(await continuity.pump("c1"), "uncertain");
  assert.equal(page.sent.length, 1);

  page.outcome = { ok: true };
  let sentAtAck = null;
  runtime.onAck = () => (sentAtAck = page.sent.length);
  assert.equal(await continuity.pump("c1", { manual: true }), "wake");
  assert.equal(page.sent.length, 2);
  assert.match(page.sent[1], /Task t-1: done\./);
  assert.equal(sentAtAck, 2, "acknowledged after the confirmed send");
  assert.deepEqual(runtime.calls.find((call) => call.path === "/browser/inbox.ack").body, { scope: CONV, inbox_ids: [7] });
  assert.equal(storage.has("uncertain:c1"), false);
  assert.equal(storage.get(`wake:${CONV}`).pending, null);
});

test("the pump sends one message per turn at rest: a handoff's primer, then the queue, then the wake, then progress", async () => {
  await bound([ZAI, "w1"]);
  storage.set(`auto:${ZAI}`, true);
  storage.set("prime:z1", true);
  storage.set("queue:z1", [
    { id: "q1", text: "first", addedAt: 1 },
    { id: "q2", text: "second", addedAt: 2 },
  ]);
  continuity.primer = async () => "HERDR_BRIDGE_V1 the protocol prompt";
  const page = open(bridged, 5, "https://chat.z.ai/c/z1", false);
  await working(101);
  await settled(102);
  await working(103); // the next turn is under way before the wake went out
  await output("compiling\nlinking");
  await continuity.tick();
  await pumped("z1");
  assert.ok(storage.get(`outbox:${ZAI}`), "its progress waits");
  assert.deepEqual(page.sent, [], "nothing while the conversation is not at rest");
  assert.equal(await continuity.pump("z1"), "busy");

  page.deliver({ type: "composer", idle: true });
  assert.deepEqual(
    [await continuity.pump("z1"), await continuity.pump("z1"), await continuity.pump("z1"), await continuity.pump("z1")],
    ["prime", "queue", "wake", "nothing"],
  );
  assert.equal(page.sent[0], "HERDR_BRIDGE_V1 the protocol prompt");
  assert.equal(page.sent[1], "first\n\nsecond");
  assert.ok(page.sent[2].endsWith(`\n${CALL_FORM_HINT}`), "a wake on a bridge site names the call form");
  assert.equal(storage.has("prime:z1"), false);
  assert.deepEqual(storage.get("queue:z1"), []);
  assert.equal(storage.has(`outbox:${ZAI}`), false, "the wake, which asks to re-inspect, drops the progress waiting");

  await output("tests: 12 passed");
  await continuity.tick();
  await pumped("z1");
  assert.equal(page.sent.length, 4);
  assert.equal(page.sent[3], "[herdr-mcp] progress in api (agents still working; no action needed yet):\ntests: 12 passed");
  assert.equal(storage.has(`outbox:${ZAI}`), false);
});

test("progress is sent only when it changed; a quiet turn gets one fallback after progressFallbackSec", async () => {
  await bound([CONV, "w1"]);
  storage.set(`auto:${CONV}`, true);
  const page = open(chat, 1, "https://chatgpt.com/c/c1");
  await continuity.tick();
  assert.deepEqual(page.sent, [], "no turn: nothing to report");
  await working(101);
  await output("step 1");
  await continuity.tick();
  await pumped("c1");
  await output("step 1");
  await continuity.tick();
  await pumped("c1");
  assert.equal(page.sent.length, 1, "the same summary twice is sent once");
  assert.equal(storage.get(`progress:${CONV}`).checked, 2, "the second output was looked at");

  clock += 599_000;
  await continuity.tick();
  await pumped("c1");
  assert.equal(page.sent.length, 1);
  clock += 1_000;
  await continuity.tick();
  await pumped("c1");
  assert.deepEqual(page.sent.slice(1), ["[herdr-mcp] workspace api is still working; no new output in the last 600 s."]);
  assert.equal(storage.get(`progress:${CONV}`).lastSentAt, clock);
  clock += 1_000;
  await continuity.tick();
  await pumped("c1");
  assert.equal(page.sent.length, 2, "one fallback, then quiet again for progressFallbackSec");
});

test("ChatGPT's 429 pause holds its pages only, and ends on time", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  await bound([CONV, "w1"], [ZAI, "w1"]);
  storage.set("queue:c1", [{ id: "q1", text: "to chatgpt", addedAt: 1 }]);
  storage.set("queue:z1", [{ id: "q2", text: "to z.ai", addedAt: 1 }]);
  const chatPage = open(chat, 1, "https://chatgpt.com/c/c1");
  const zaiPage = open(bridged, 2, "https://chat.z.ai/c/z1");
  await rateLimit.hit();
  assert.equal(await continuity.pump("c1"), "paused");
  assert.equal(await continuity.pump("z1"), "queue");
  assert.deepEqual([chatPage.sent, zaiPage.sent], [[], ["to z.ai"]]);
  assert.equal((await continuity.hudState(chat.forConv("c1"))).pausedMs, 30_000);
  clock += 30_000;
  assert.equal(await continuity.pump("c1"), "queue");
  assert.deepEqual(chatPage.sent, ["to chatgpt"]);
});

test("after a reconnect with a gap, a turn that ended while away wakes once, inbox outcomes wake too, a closed tab's root binding goes", async () => {
  storage.set("ws:w1", { working: true, turn: "w90" });
  runtime.workspaces.push({ workspace_id: "w2", label: "web", working: false, agents: [] });
  runtime.bind(CONV, "w1");
  runtime.bind(ZAI, "w2", { label: "web" });
  runtime.bind("chatgpt:root:tab-9", "w2", { label: "web" });
  runtime.bind("chatgpt:root:tab-8", "w2", { label: "web" });
  runtime.inbox.set(ZAI, [{ inbox_id: 3, task_id: "t-9", outcome: "failed" }]);
  runtime.seq = 120;
  await continuity.hello({ seq: 120, replay: { from: 95, gap: true } }, 95);
  assert.deepEqual(storage.get("ws:w1"), { working: false, turn: "w90" });
  assert.deepEqual(storage.get(`wake:${CONV}`).pending, { turn: "w90", at: clock, seq: 120 });
  assert.deepEqual(storage.get(`wake:${ZAI}`).pending, { turn: "inbox3", at: clock, seq: 120 });
  assert.equal(continuity.notes.get(ZAI).line, "a task finished: a wake is waiting");
  assert.equal(bindings.get("chatgpt:root:tab-9"), null, "tab 9 is closed: its pending binding is deleted");
  assert.ok(bindings.get("chatgpt:root:tab-8"), "tab 8 is still open (not connected): kept");
  assert.equal(runtime.bindings.has("chatgpt:root:tab-9"), false);

  const before = structuredClone([storage.get(`wake:${CONV}`), storage.get(`wake:${ZAI}`)]);
  await continuity.hello({ seq: 120, replay: { from: 120, gap: false } }, 120);
  assert.deepEqual([storage.get(`wake:${CONV}`), storage.get(`wake:${ZAI}`)], before, "a second hello wakes nobody again");
  assert.equal(runtime.paths().includes("/browser/inbox.ack"), false);
});

test("a workspace first seen on a hello starts from the live state without a wake", async () => {
  runtime.bind(CONV, "w1");
  runtime.workspaces[0].working = true;
  runtime.seq = 50;
  await continuity.hello({ seq: 50, replay: { from: 0, gap: false } }, null);
  assert.deepEqual(storage.get("ws:w1"), { working: true, turn: "s50" });
  assert.equal(storage.has(`wake:${CONV}`), false);
  runtime.workspaces[0].working = false;
  runtime.seq = 60;
  await continuity.hello({ seq: 60, replay: { from: 50, gap: true } }, 50);
  assert.equal(storage.get(`wake:${CONV}`).pending.turn, "s50", "the turn it saw working ended");
});

test("Check Herdr sends the live state now, leaves the inbox unacknowledged, and is refused unbound, under Auto and while busy", async () => {
  const page = open(chat, 1, "https://chatgpt.com/c/c1");
  assert.equal(await continuity.check("c1"), "unbound");
  assert.deepEqual(page.of("error").at(-1), { type: "error", code: "check_unbound", message: "Bind this page to a workspace first." });

  await bound([CONV, "w1"]);
  storage.set(`auto:${CONV}`, true);
  assert.equal(await continuity.check("c1"), "auto");
  assert.equal(page.of("error").at(-1).code, "check_auto");

  storage.set(`auto:${CONV}`, false);
  runtime.workspaces[0] = { workspace_id: "w1", label: "api", working: true, agents: [{ pane_id: "w1:p1", agent: "coder", status: "working" }] };
  runtime.inbox.set(CONV, [{ inbox_id: 4, task_id: "t-2", outcome: "done" }]);
  assert.equal(await continuity.check("c1"), "check");
  assert.deepEqual(page.sent[0].split("\n"), [
    `[herdr-mcp] Herdr's live state of workspace "api" (w1), read just now:`,
    "An agent is working.",
    "Agents now: coder working.",
    "Task t-2: done.",
    "This is a signal to re-inspect, not a result: read the live Herdr state, the agents' output, Git and the tests before deciding the next step.",
  ]);
  assert.equal(runtime.paths().includes("/browser/inbox.ack"), false, "only a wake acknowledges");

  page.deliver({ type: "composer", idle: false });
  assert.equal(await continuity.check("c1"), "busy");
  assert.equal(page.of("error").at(-1).code, "check_busy");
  assert.equal(page.sent.length, 1);
});

test("a Project's wakes go to its active conversation; Continue on an unbound page names no workspace", async () => {
  await bound(["chatgpt:project:g-p-abc", "w1", { activeConvKey: "/c/c2" }]);
  storage.set("auto:chatgpt:project:g-p-abc", true);
  const other = open(chat, 1, "https://chatgpt.com/g/g-p-abc/c/c1");
  const active = open(chat, 2, "https://chatgpt.com/g/g-p-abc/c/c2");
  const unbound = open(chat, 3, "https://chatgpt.com/c/c9");
  await working(101);
  await settled(102);
  await pumped("c2");
  assert.deepEqual([other.sent.length, active.sent.length], [0, 1]);
  assert.equal(await continuity.pump("c1"), "unbound", "not the Project's active conversation");

  assert.equal(await continuity.pump("c9"), "unbound");
  assert.equal(await continuity.pump("c9", { manual: true }), "continue");
  assert.deepEqual(unbound.sent, ["[herdr-mcp] Continue: go on with the next step."]);
  assert.equal(await continuity.pump("c404"), "no_tab");
});

test("the HUD's state says what is pending for the page, and every tab gets it on a change", async () => {
  await bound([CONV, "w1"]);
  storage.set("queue:c1", [{ id: "q1", text: "later", addedAt: 1 }]);
  storage.set("uncertain:c1", true);
  const page = open(chat, 1, "https://chatgpt.com/c/c1", false);
  await working(101);
  const state = await continuity.hudState(chat.forConv("c1"));
  assert.equal(state.page.scope, CONV);
  assert.deepEqual(
    { working: state.working, auto: state.auto, wakePending: state.wakePending, queue: state.queue, uncertain: state.uncertain, isTarget: state.isTarget },
    { working: true, auto: false, wakePending: false, queue: ["later"], uncertain: true, isTarget: true },
  );
  assert.equal(state.note.line, "agents working");
  await settled(102);
  const deadline = Date.now() + 60_000;
  while (!page.of("hud").some((frame) => frame.state.wakePending) && Date.now() < deadline) {
    await new Promise((resolve) => setImmediate(resolve));
  }
  assert.equal(page.of("hud").at(-1).state.wakePending, true);
  assert.deepEqual(await continuity.hudState({ tabId: 4, page: null }), { page: null });

  await continuity.handle("agent_gone", { seq: 103, workspace_id: "w1", pane_id: "w1:p1", agent: "coder", workspace_working: false, at: 103 });
  assert.equal(runtime.paths().at(-1), "GET /push/state", "a pane gone re-reads the live state");
});

test("a wake's inbox comes with the settle, else is read as the settle arrives; its agents are the events' (no /push/state on its way)", async () => {
  runtime.workspaces[0].agents = [
    { pane_id: "w1:p1", agent: "coder", status: "idle" },
    { pane_id: "w1:p2", agent: "reviewer", status: "idle" },
  ];
  await bound([CONV, "w1"]);
  await bindings.refreshState();
  storage.set(`auto:${CONV}`, true);
  const page = open(chat, 1, "https://chatgpt.com/c/c1");
  await working(101);
  const count = (wanted) => runtime.paths().filter((path) => path === wanted).length;
  const reads = () => count("/browser/inbox.read") + count("GET /push/state");
  const before = reads();
  const states = count("GET /push/state");
  // A runtime since issue 24: the settle that ends the turn carries each bound scope's inbox.
  const inbox = { [CONV]: { items: [{ inbox_id: 5, task_id: "t-5", outcome: "done" }], more: false } };
  runtime.inbox.set(CONV, inbox[CONV].items);
  await continuity.handle("agent_settled", { seq: 102, workspace_id: "w1", pane_id: "w1:p1", agent: "coder", status: "done", workspace_working: false, at: 102, inbox });
  await pumped("c1");
  assert.equal(page.sent.length, 1);
  assert.deepEqual(page.sent[0].split("\n").slice(1, 3), ["Agents now: coder done, reviewer idle.", "Task t-5: done."]);
  assert.equal(reads(), before, "neither the inbox nor /push/state was read for it");
  assert.deepEqual(runtime.calls.at(-1), { path: "/browser/inbox.ack", body: { scope: CONV, inbox_ids: [5] } });

  // An older runtime: the settle carries nothing, so the inbox is read as the settle arrives.
  await working(103);
  runtime.inbox.set(CONV, [{ inbox_id: 6, task_id: "t-6", outcome: "failed" }]);
  await settled(104);
  await pumped("c1");
  assert.match(page.sent[1], /Task t-6: failed\./);
  assert.equal(count("/browser/inbox.read"), 1);
  assert.equal(count("GET /push/state"), states, "still no /push/state for a wake");

  // Auto off: the wake waits; a Continue long after reads the inbox again (the one read at the
  // settle is stale by then).
  storage.set(`auto:${CONV}`, false);
  await working(105);
  runtime.inbox.set(CONV, [{ inbox_id: 7, task_id: "t-7", outcome: "done" }]);
  await continuity.handle("agent_settled", { seq: 106, workspace_id: "w1", pane_id: "w1:p1", agent: "coder", status: "done", workspace_working: false, at: 106, inbox: { [CONV]: { items: [], more: false } } });
  await pumped("c1");
  assert.equal(page.sent.length, 2, "Auto is off");
  clock += WAKE_INBOX_FRESH_MS + 1;
  assert.equal(await continuity.pump("c1", { manual: true }), "wake");
  assert.match(page.sent[2], /Task t-7: done\./, "read again at the Continue");
});
