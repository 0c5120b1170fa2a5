import assert from "node:assert/strict";
import { test } from "node:test";

import { Reassembler } from "../src/lib/chunks.js";

function split(text, size) {
  const parts = [];
  for (let offset = 0; offset < text.length; offset += size) {
    parts.push(text.slice(offset, offset + size));
  }
  return parts;
}

test("chunks in order give the whole reply", () => {
  const reply = { id: "r1", status: 200, body: { text: "é".repeat(3000) } };
  const parts = split(JSON.stringify(reply), 1000);
  const reassembler = new Reassembler();
  let whole = null;
  parts.forEach((data, index) => {
    whole = reassembler.add({ id: "r1", chunk: { index, count: parts.length, data } });
    assert.equal(whole === null, index < parts.length - 1);
  });
  assert.deepEqual(whole, reply);
});

test("out of order or out of range chunks are refused and forgotten", () => {
  const reassembler = new Reassembler();
  reassembler.add({ id: "r2", chunk: { index: 0, count: 3, data: "{" } });
  assert.throws(() => reassembler.add({ id: "r2", chunk: { index: 2, count: 3, data: "}" } }), { code: "chunk_invalid" });
  assert.throws(() => reassembler.add({ id: "r3", chunk: { index: 3, count: 3, data: "x" } }), { code: "chunk_invalid" });
  assert.throws(() => reassembler.add({ id: "r4", chunk: { index: 0, count: 1 } }), { code: "chunk_invalid" });
  assert.equal(reassembler.parts.size, 0);
});
