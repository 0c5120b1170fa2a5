import assert from "node:assert/strict";
import { test } from "node:test";

import { MAX_BATCH_CHARS, MAX_ENTRIES, MAX_ENTRY_CHARS, QueueError, addEntry, nextBatch, removeSent } from "../src/lib/queue.js";

test("entries go out in the order they were added, merged with blank lines", () => {
  let queue = [];
  queue = addEntry(queue, "  first  ", 1, "a");
  queue = addEntry(queue, "second", 2, "b");
  queue = addEntry(queue, "third", 3, "c");
  assert.deepEqual(nextBatch(queue), { ids: ["a", "b", "c"], text: "first\n\nsecond\n\nthird" });
  assert.equal(nextBatch([]), null);
});

test("only the entries that were sent leave; one added meanwhile stays", () => {
  let queue = addEntry(addEntry([], "one", 1, "a"), "two", 2, "b");
  const batch = nextBatch(queue);
  queue = addEntry(queue, "three", 3, "c");
  queue = removeSent(queue, batch.ids);
  assert.deepEqual(queue.map((entry) => entry.text), ["three"]);
});

test("a failed send removes nothing", () => {
  const queue = addEntry([], "one", 1, "a");
  nextBatch(queue);
  assert.equal(queue.length, 1);
  assert.deepEqual(removeSent(queue, []), queue);
});

test("a batch holds as many of the oldest entries as fit, always at least one", () => {
  const big = "x".repeat(MAX_ENTRY_CHARS);
  let queue = [];
  queue = addEntry(queue, big, 1, "a");
  queue = addEntry(queue, big, 2, "b");
  queue = addEntry(queue, big, 3, "c");
  const batch = nextBatch(queue);
  assert.deepEqual(batch.ids, ["a"].concat(2 * MAX_ENTRY_CHARS + 2 <= MAX_BATCH_CHARS ? ["b"] : []));
  assert.ok(batch.text.length <= MAX_BATCH_CHARS);
});

test("bad entries are refused with a code", () => {
  assert.throws(() => addEntry([], "   ", 1), (error) => error instanceof QueueError && error.code === "queue_empty_text");
  assert.throws(() => addEntry([], "y".repeat(MAX_ENTRY_CHARS + 1), 1), { code: "queue_entry_too_long" });
  let queue = [];
  for (let index = 0; index < MAX_ENTRIES; index += 1) {
    queue = addEntry(queue, `m${index}`, index);
  }
  assert.throws(() => addEntry(queue, "one more", 99), { code: "queue_full" });
  assert.equal(new Set(queue.map((entry) => entry.id)).size, MAX_ENTRIES, "ids are unique");
});
