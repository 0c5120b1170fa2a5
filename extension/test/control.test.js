import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import {
  CONTROL_METHODS,
  ControlError,
  isControlMethod,
  keepsPending,
  knownCode,
  newKey,
  pinDrift,
  pinFromPane,
  readLines,
  sendRequest,
} from "../src/lib/control.js";
import { useCatalog } from "../src/lib/i18n.js";

// The texts are the English catalog's (chrome.i18n is absent here).
useCatalog(JSON.parse(readFileSync(new URL("../_locales/en/messages.json", import.meta.url), "utf8")));

const agentPane = { pane_id: "w1:p2", workspace_id: "w1", label: "coder", agent: "coder", agent_kind: "claude" };
const shellPane = { pane_id: "w1:p3", workspace_id: "w1", label: "shell", agent: null, agent_kind: null };

test("only the four Control Center methods are offered", () => {
  assert.deepEqual([...CONTROL_METHODS].sort(), ["agent.prompt", "pane.list", "pane.read", "pane.send_input"]);
  assert.equal(isControlMethod("pane.read"), true);
  for (const other of ["pane.close", "agent.start", "pane.send_keys", "workspace.close", "binding.set", ""]) {
    assert.equal(isControlMethod(other), false, other);
  }
});

test("an agent pin prompts the agent, fenced by pane, workspace and agent name", () => {
  const pin = pinFromPane(agentPane, "api");
  assert.deepEqual(sendRequest(pin, "run the tests\n", "cc-1234567890"), {
    method: "agent.prompt",
    body: { pane_id: "w1:p2", workspace_id: "w1", agent: "coder", text: "run the tests", idempotency_key: "cc-1234567890" },
  });
  assert.equal(sendRequest(pin, "two\nlines", "cc-1234567890").body.text, "two\nlines");
});

test("a terminal pin types one line then Enter", () => {
  const pin = pinFromPane(shellPane, "api");
  assert.deepEqual(sendRequest(pin, "ls -la", "cc-abcdefgh"), {
    method: "pane.send_input",
    body: { pane_id: "w1:p3", workspace_id: "w1", text: "ls -la", idempotency_key: "cc-abcdefgh" },
  });
  assert.throws(() => sendRequest(pin, "a\nb", "cc-abcdefgh"), (error) => error instanceof ControlError && error.code === "invalid_text");
  assert.throws(() => sendRequest(pin, "   ", "cc-abcdefgh"), /Write something/);
  assert.throws(() => sendRequest(pin, "x".repeat(4001), "cc-abcdefgh"), /at most 4000/);
});

test("drift between the pin and the live panes is named", () => {
  const pin = pinFromPane(shellPane);
  assert.equal(pinDrift(pin, [shellPane]), null);
  assert.equal(pinDrift(pin, []), "the pane is gone");
  assert.equal(pinDrift(pin, [{ ...shellPane, agent: "coder" }]), "the pane now runs agent coder");
  assert.equal(pinDrift(pinFromPane(agentPane), [{ ...agentPane, agent: null }]), "the pane no longer runs an agent");
  assert.equal(pinDrift(pin, [{ ...shellPane, workspace_id: "w2" }]), "the pane moved to workspace w2");
});

test("unknown outcomes keep the send for a retry with the same key; refusals drop it", () => {
  for (const code of ["timeout", "runtime_unavailable", "delivery_unknown", "delivery_uncertain", "idempotency_in_flight", "herdr_unavailable"]) {
    assert.equal(keepsPending(code), true, code);
  }
  for (const code of ["target_changed", "pane_has_agent", "invalid_argument", "pane_not_found", "agent_blocked", "idempotency_key_conflict"]) {
    assert.equal(keepsPending(code), false, code);
  }
});

test("sent, answer lost: the runtime's older name is read and shown as delivery_unknown, other codes as they came", () => {
  assert.equal(knownCode("delivery_uncertain"), "delivery_unknown");
  assert.equal(knownCode("delivery_unknown"), "delivery_unknown");
  for (const code of ["timeout", "target_changed", "failed", "toString", "__proto__", "constructor"]) {
    assert.equal(knownCode(code), code, code);
  }
  assert.equal(keepsPending("toString"), false);
});

test("keys and line counts stay within the runtime's limits", () => {
  const key = newKey(() => "123e4567-e89b-12d3-a456-426614174000");
  assert.match(key, /^[A-Za-z0-9._:-]{8,128}$/u);
  assert.equal(readLines("500"), 200);
  assert.equal(readLines("0"), 80);
  assert.equal(readLines("abc"), 80);
  assert.equal(readLines("12.7"), 12);
});
