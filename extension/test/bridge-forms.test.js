// The bridge's call forms (docs/browser-protocol.md, "Bridge call forms"): what parseCalls takes
// from a reply's code blocks as the page holds them (the code element's text, which Markdown
// rendering leaves as written), and what it answers as an error.

import assert from "node:assert/strict";
import test from "node:test";

import { fencedBlocks, parseCalls } from "../src/lib/bridge-protocol.js";

const one = (tool, args) => JSON.stringify({ tool, args });

const FORMS = [
  ["underscores", one("herdr_fs_read", { path: "/r/pkg/__init__.py" }), [["herdr_fs_read", { path: "/r/pkg/__init__.py" }]], 0],
  ["html in a string", one("herdr_fs_edit", { old: "<b>x</b>", new: "<i>y</i>" }), [["herdr_fs_edit", { old: "<b>x</b>", new: "<i>y</i>" }]], 0],
  ["escapes", one("herdr_fs_write", { content: 'say "hi"\\n\\\\ end' }), [["herdr_fs_write", { content: 'say "hi"\\n\\\\ end' }]], 0],
  ["backslashes", one("herdr_fs_read", { path: "C:\\dir\\file" }), [["herdr_fs_read", { path: "C:\\dir\\file" }]], 0],
  ["pretty-printed", JSON.stringify({ tool: "herdr_git", args: { root: "/r", action: "status" } }, null, 2), [["herdr_git", { root: "/r", action: "status" }]], 0],
  ["two calls", `${one("a", {})}\n${JSON.stringify({ tool: "b", args: { n: 1 } }, null, 2)}`, [["a", {}], ["b", { n: 1 }]], 0],
  ["two on one line", `${one("a", {})} ${one("b", {})}`, [], 1],
  ["cut midway", '{"tool": "a", "args": {"path": "/x', [], 1],
  ["bad args", '{"tool": "a", "args": [1]}', [], 1],
  ["text between calls", `${one("a", {})}\nthen\n${one("b", {})}`, [["a", {}]], 1],
];

for (const [name, block, wanted, errorCount] of FORMS) {
  test(`call form: ${name}`, () => {
    const { calls, errors } = parseCalls(`Here.\n${block}\nDone.`, [block]);
    assert.deepEqual(calls.map((call) => [call.tool, call.args]), wanted);
    assert.equal(errors.length, errorCount, errors.join("; "));
    // The same block as raw Markdown text in a fence gives the same answer.
    const raw = parseCalls(`Here.\n\`\`\`json\n${block}\n\`\`\`\nDone.`);
    assert.deepEqual(raw.calls.map((call) => [call.tool, call.args]), wanted);
    assert.equal(raw.errors.length, errorCount);
  });
}

test("a code block that is someone's code is not a call and not an error", () => {
  assert.deepEqual(parseCalls("x", ["def f():\n    return {'a': 1}", "{\"a\": 1}"]), { calls: [], errors: [] });
});

test("a call line in the rendered prose (outside any code block) is an error, never a call", () => {
  const { calls, errors } = parseCalls('Sure:\n{"tool": "herdr_fs_write", "args": {"path": "init.py"}}', []);
  assert.deepEqual(calls, []);
  assert.match(errors[0], /outside a fenced json code block/);
});

test("fences: backtick and tilde, longer closers, an unclosed fence runs to the end", () => {
  assert.deepEqual(fencedBlocks("a\n```json\n1\n```\nb\n~~~\n2\n~~~~\n````\n3\n```\n````\n```\n4"), ["1", "2", "3\n```", "4"]);
});
