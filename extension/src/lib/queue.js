// The person's queued next messages, per conversation. Pure list operations; the worker keeps
// each conversation's queue in chrome.storage.local under `queue:<convKey>`.
//
// Rules (seed 000): entries keep the order they were added in and go out merged with a blank
// line between them; only a confirmed send removes them (exactly the entries that went out, so
// an entry added while the batch was being typed stays); a blocked or failed send removes nothing.

export const MAX_ENTRIES = 20;
export const MAX_ENTRY_CHARS = 8_000;
export const MAX_BATCH_CHARS = 16_000;

export class QueueError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

let counter = 0;

/** A new entry id: unique within this queue even for two entries added in the same millisecond. */
export function entryId(now) {
  counter = (counter + 1) % 1_000_000;
  return `q${now.toString(36)}-${counter.toString(36)}`;
}

export function addEntry(queue, text, now, id = entryId(now)) {
  const trimmed = typeof text === "string" ? text.trim() : "";
  if (!trimmed) {
    throw new QueueError("queue_empty_text", "Nothing to queue: the composer is empty.");
  }
  if (trimmed.length > MAX_ENTRY_CHARS) {
    throw new QueueError("queue_entry_too_long", `A queued message holds at most ${MAX_ENTRY_CHARS} characters.`);
  }
  if (queue.length >= MAX_ENTRIES) {
    throw new QueueError("queue_full", `At most ${MAX_ENTRIES} messages can wait in one conversation's queue.`);
  }
  return [...queue, { id, text: trimmed, addedAt: now }];
}

/**
 * The next batch to send: the oldest entries, in order, as many as fit in MAX_BATCH_CHARS
 * (always at least one), merged with blank lines. `null` when the queue is empty.
 */
export function nextBatch(queue) {
  if (queue.length === 0) {
    return null;
  }
  const taken = [queue[0]];
  let length = queue[0].text.length;
  for (const entry of queue.slice(1)) {
    if (length + 2 + entry.text.length > MAX_BATCH_CHARS) {
      break;
    }
    taken.push(entry);
    length += 2 + entry.text.length;
  }
  return { ids: taken.map((entry) => entry.id), text: taken.map((entry) => entry.text).join("\n\n") };
}

/** The queue after a confirmed send of `ids`: those entries go, everything else stays in order. */
export function removeSent(queue, ids) {
  const sent = new Set(ids);
  return queue.filter((entry) => !sent.has(entry.id));
}
