import assert from "node:assert/strict";
import { test } from "node:test";

import { cleanResult, isBlob, RESULT_CAP_CHARS, scrub } from "../src/lib/bridge-clean.js";
import {
  checkCalls,
  MARKER,
  messageAnchor,
  messageKey,
  parseCalls,
  protocolPrompt,
  recoveryDecision,
  resultMessage,
  roundsUsed,
  runsInParallel,
  isCallsOnly,
} from "../src/lib/bridge-protocol.js";
import { validate } from "../src/lib/bridge-schema.js";
import { READ, WRITE } from "./sample-tools.js";

test("the prompt is built from the tools given, with the marker first", () => {
  const prompt = protocolPrompt([READ, WRITE]);
  assert.ok(prompt.startsWith(MARKER));
  assert.match(prompt, /- herdr_fs_read: Read a file\./);
  assert.match(prompt, /"required":\["path","content"\]/);
  assert.doesNotMatch(protocolPrompt([READ]), /herdr_fs_write/);
});

test("calls come from fenced code blocks; a call line in the prose is an error, never run", () => {
  const text = [
    "Let me look.",
    "```json",
    '{"tool": "herdr_fs_read", "args": {"path": "README.md"}}',
    '{"tool": "herdr_inspect"}',
    "```",
    '{"tool": "herdr_fs_write", "args": {"path": "x"}}',
    "```json",
    '{"tool": "x", "args": {}, "extra": 1}',
    '{"tool": "y", "args": [1]}',
    "```",
    "```python",
    "print({'not': 'a call'})",
    "```",
  ].join("\n");
  const { calls, errors } = parseCalls(text);
  assert.deepEqual(calls.map((call) => [call.tool, call.args]), [
    ["herdr_fs_read", { path: "README.md" }],
    ["herdr_inspect", {}],
  ]);
  assert.equal(errors.length, 3, errors);
  assert.match(errors[0], /unknown keys/);
  assert.match(errors[1], /"args" must be an object/);
  assert.match(errors[2], /outside a fenced json code block/);
  assert.equal(isCallsOnly('```json\n{"tool": "a", "args": {}}\n\n{"tool": "b"}\n```'), true);
  assert.equal(isCallsOnly('Sure.\n```json\n{"tool": "a"}\n```'), false);
});

test("the schema subset: type, required, properties, additionalProperties, enum, lengths, bounds, pattern", () => {
  const schema = {
    type: "object",
    required: ["a"],
    additionalProperties: false,
    properties: {
      a: { type: "string", minLength: 2, maxLength: 3, pattern: "^[a-z]+$" },
      n: { type: "integer", minimum: 1, maximum: 5 },
      e: { enum: ["x", "y"] },
      list: { type: "array", items: { type: "number" }, maxItems: 2 },
    },
  };
  assert.deepEqual(validate(schema, { a: "ab", n: 3, e: "x", list: [1, 2.5] }), []);
  const errors = validate(schema, { a: "ABCD", n: 2.5, e: "z", list: [1, "2", 3], extra: true });
  assert.deepEqual(errors, [
    "args.a: at most 3 characters",
    "args.a: must match ^[a-z]+$",
    "args.n: must be integer, not number",
    "args.e: must be one of [\"x\",\"y\"]",
    "args.list: at most 2 items",
    "args.list[1]: must be number, not string",
    "args.extra: unknown property",
  ]);
  assert.deepEqual(validate(schema, {}), ["args.a: required"]);
  assert.deepEqual(validate(schema, []), ["args: must be object, not array"]);
  assert.deepEqual(validate({ type: "integer", minimum: 0 }, -1, "n"), ["n: at least 0"]);
});

test("calls are checked against tools/list: unknown tools and bad arguments are errors, not runs", () => {
  const checked = checkCalls(
    [
      { tool: "herdr_fs_read", args: { path: "a" } },
      { tool: "herdr_fs_read", args: { path: "" } },
      { tool: "nope", args: {} },
      { tool: "herdr_fs_write", args: { path: "a", content: "b" } },
    ],
    [READ, WRITE],
  );
  assert.equal(checked[0].error, undefined);
  assert.equal(checked[0].readOnly, true);
  assert.match(checked[1].error, /^invalid_arguments: args.path: at least 1 characters/);
  assert.match(checked[2].error, /^unknown_tool/);
  assert.equal(checked[3].readOnly, false);
  assert.equal(runsInParallel(checked.slice(0, 2)), true);
  assert.equal(runsInParallel(checked), false);
});

test("rounds count TOOL_RESULT messages since the person's own message", () => {
  const result = resultMessage([{ tool: "t", isError: false, text: "x" }]);
  const messages = [
    { role: "user", text: "hello" },
    { role: "assistant", text: '{"tool": "t"}' },
    { role: "user", text: result },
    { role: "assistant", text: '{"tool": "t"}' },
    { role: "user", text: result },
  ];
  assert.equal(roundsUsed(messages), 2);
  assert.equal(roundsUsed([...messages, { role: "user", text: "again" }]), 0);
});

test("after a reload only a never-dispatched call, or a read-only one, is run again", () => {
  const prompt = { role: "user", text: `${MARKER}\n...` };
  const call = { role: "assistant", text: '```json\n{"tool": "herdr_fs_write", "args": {"path": "a", "content": "b"}}\n```' };
  const mutation = checkCalls(parseCalls(call.text).calls, [READ, WRITE]);
  const reading = checkCalls([{ tool: "herdr_fs_read", args: { path: "a" } }], [READ, WRITE]);
  assert.equal(recoveryDecision({ messages: [prompt, call], dispatched: false, checked: mutation }).run, true);
  assert.equal(recoveryDecision({ messages: [prompt, call], dispatched: true, checked: mutation }).run, false);
  assert.equal(recoveryDecision({ messages: [prompt, call], dispatched: true, checked: reading }).run, true);
  assert.equal(recoveryDecision({ messages: [call], dispatched: false, checked: mutation }).run, false);
  const answered = [prompt, call, { role: "user", text: resultMessage([]) }];
  // An error-only reply at load (a call cut midway) still reaches the model as an error.
  const cut = { role: "assistant", text: '```json\n{"tool": "herdr_fs_write", "args": {"path": \n```' };
  assert.equal(recoveryDecision({ messages: [prompt, cut], dispatched: false, checked: [] }).run, true);
  assert.equal(recoveryDecision({ messages: answered, dispatched: true, checked: mutation }).run, false);
});

test("blobs over 4 KiB become notes; small ones and prose stay", () => {
  const blob = Buffer.alloc(6000, 7).toString("base64");
  assert.equal(isBlob(blob), true);
  assert.equal(isBlob(blob.slice(0, 4000)), false);
  const prose = "word ".repeat(2000);
  assert.equal(isBlob(prose), false);
  assert.equal(isBlob(`data:image/png;base64,${blob}`), true);
  assert.equal(isBlob("\u0000\u0001binary".repeat(1000)), true);
  const scrubbed = scrub({ a: { b: [blob, "keep"] }, n: 1 });
  assert.deepEqual(scrubbed, { a: { b: [`[binary or base64 data of ${blob.length} bytes omitted]`, "keep"] }, n: 1 });
});

test("nested values are bounded in depth, items and string length", () => {
  let deep = "leaf";
  for (let i = 0; i < 12; i += 1) {
    deep = { d: deep };
  }
  assert.match(JSON.stringify(scrub(deep)), /nested deeper than 8 levels/);
  const many = scrub(Array.from({ length: 300 }, (_, i) => i));
  assert.equal(many.length, 201);
  assert.equal(many.at(-1), "[... 100 more items cut]");
});

test("a 2 MB result is cleaned and capped, and says so", () => {
  const text = JSON.stringify({ path: "big.txt", content: "line of text\n".repeat(160_000), blob: Buffer.alloc(8192).toString("base64") });
  assert.ok(text.length > 2_000_000);
  const cleaned = cleanResult({ content: [{ type: "text", text }] });
  assert.ok(cleaned.text.length <= RESULT_CAP_CHARS + 200);
  assert.equal(cleaned.capped, false); // scrubbing alone brought it under the cap
  assert.match(cleaned.text, /more characters cut/);
  assert.match(cleaned.text, /binary or base64 data of \d+ bytes omitted/);
  const plain = cleanResult({ content: [{ type: "text", text: "x y ".repeat(600_000) }], isError: true });
  assert.equal(plain.capped, true);
  assert.equal(plain.isError, true);
  assert.match(plain.text, /result capped at 16000 of 2400000 characters/);
  assert.match(cleanResult({ content: [{ type: "image", mimeType: "image/png", data: "AAAA" }] }).text, /image image\/png of 4 bytes omitted/);
  assert.equal(cleanResult({ structuredContent: { a: 1 } }).text, '{"a":1}');
});

test("message keys are stable for the same message and differ for another", async () => {
  const a = await messageKey("zai:conv:1", "0\nprevious", "x");
  assert.equal(a, await messageKey("zai:conv:1", "0\nprevious", "x"));
  assert.notEqual(a, await messageKey("zai:conv:2", "0\nprevious", "x"));
  assert.notEqual(a, await messageKey("zai:conv:1", "1\nprevious", "x"));
  assert.match(a, /^[0-9a-f]{32}$/);
});

test("a message's anchor does not move when earlier rows stop being shown", () => {
  const texts = ["prompt", "call A", "TOOL_RESULT 1", "call B", "wake", "call A", "TOOL_RESULT 2", "call A"];
  const all = texts.map((text) => ({ text }));
  // The last reply "call A" after "TOOL_RESULT 2": unique pair, whatever is shown above it.
  assert.equal(messageAnchor(all, 7), "0\nTOOL_RESULT 2");
  assert.equal(messageAnchor(all.slice(3), 4), "0\nTOOL_RESULT 2");
  // Identical pairs ("wake" then "call A", twice) are told apart by their count.
  const twice = ["wake", "call A", "TOOL_RESULT", "wake", "call A"].map((text) => ({ text }));
  assert.equal(messageAnchor(twice, 1), "0\nwake");
  assert.equal(messageAnchor(twice, 4), "1\nwake");
  // The first pair no longer shown: the second takes the first's anchor (already dispatched), never a new one.
  assert.equal(messageAnchor(twice.slice(2), 2), "0\nwake");
  assert.equal(messageAnchor(all, 0), "0\n");
});
