// Cleaning a tool result before it goes into a web conversation as a TOOL_RESULT message: long
// strings that are base64 or binary are replaced by a note, nested values are bounded (depth,
// items, string length), and the whole text is capped.
//
// The cap: RESULT_CAP_CHARS characters of the TOOL_RESULT body (16 000 ≈ 4 000 tokens). It comes
// from the pages, not from the runtime: z.ai's and DeepSeek's composers take long pastes, but each
// result stays in the model's context for the rest of the conversation, so one result must never
// take a large share of it. A capped result says so and by how much, so the model can ask for a
// narrower read (an offset, a smaller range).

import { codePointLength, cutCodePoints } from "./text.js";

export const RESULT_CAP_CHARS = 16_000;
/** A string over this many bytes that looks like base64 or binary becomes a note. */
export const BLOB_BYTES = 4 * 1024;
export const MAX_DEPTH = 8;
export const MAX_ITEMS = 200;
/** One string inside a structured value; the whole text is capped again afterwards. */
export const MAX_STRING_CHARS = 8_000;

const BASE64 = /^[A-Za-z0-9+/=\s_-]+$/;

function byteLength(text) {
  return new TextEncoder().encode(text).length;
}

/** True for a long string that is base64 (or base64url) text, a data: URL, or binary bytes. */
export function isBlob(text) {
  if (typeof text !== "string" || byteLength(text) <= BLOB_BYTES) {
    return false;
  }
  if (/^data:[^,]{0,200};base64,/.test(text)) {
    return true;
  }
  const sample = text.slice(0, 65_536);
  if (BASE64.test(sample) && !/[ \t]/.test(sample)) {
    // prose has spaces between words; base64 has at most line breaks every 64-76 characters
    const words = sample.split(/\s+/).filter(Boolean);
    if (words.length === 1 || words.slice(0, -1).every((word) => word.length >= 60)) {
      return true;
    }
  }
  let control = 0;
  for (const char of sample) {
    const code = char.codePointAt(0);
    if ((code < 32 && code !== 9 && code !== 10 && code !== 13) || code === 0xfffd) {
      control += 1;
    }
  }
  return control > sample.length / 100;
}

function blobNote(text) {
  return `[binary or base64 data of ${byteLength(text)} bytes omitted]`;
}

/** `value` with blobs replaced, strings shortened, arrays and objects bounded, depth bounded. */
export function scrub(value, depth = 0) {
  if (typeof value === "string") {
    if (isBlob(value)) {
      return blobNote(value);
    }
    return value.length > MAX_STRING_CHARS
      ? `${cutCodePoints(value, MAX_STRING_CHARS)}[... ${codePointLength(value) - MAX_STRING_CHARS} more characters cut]`
      : value;
  }
  if (value === null || typeof value !== "object") {
    return value;
  }
  if (depth >= MAX_DEPTH) {
    return "[nested deeper than 8 levels: cut]";
  }
  if (Array.isArray(value)) {
    const items = value.slice(0, MAX_ITEMS).map((item) => scrub(item, depth + 1));
    if (value.length > MAX_ITEMS) {
      items.push(`[... ${value.length - MAX_ITEMS} more items cut]`);
    }
    return items;
  }
  const out = {};
  const entries = Object.entries(value);
  for (const [key, item] of entries.slice(0, MAX_ITEMS)) {
    out[key] = scrub(item, depth + 1);
  }
  if (entries.length > MAX_ITEMS) {
    out["..."] = `${entries.length - MAX_ITEMS} more keys cut`;
  }
  return out;
}

/**
 * The text of an MCP tools/call result for the model: its text contents, or its structured
 * content when there is no text, scrubbed and capped. Images and other binary contents become
 * notes. Returns `{ text, isError, capped, originalChars }`.
 */
export function cleanResult(result, cap = RESULT_CAP_CHARS) {
  const parts = [];
  for (const item of result?.content ?? []) {
    if (item?.type === "text" && typeof item.text === "string") {
      parts.push(textPart(item.text));
    } else if (item?.type === "image" || item?.type === "audio") {
      parts.push(`[${item.type} ${item.mimeType ?? ""} of ${byteLength(item.data ?? "")} bytes omitted]`);
    } else if (item?.type === "resource" && item.resource) {
      const { text, blob, uri } = item.resource;
      parts.push(blob !== undefined ? `[resource ${uri ?? ""}: ${blobNote(blob)}]` : textPart(text ?? ""));
    } else if (item !== undefined) {
      parts.push(JSON.stringify(scrub(item)));
    }
  }
  if (parts.length === 0 && result?.structuredContent !== undefined) {
    parts.push(JSON.stringify(scrub(result.structuredContent)));
  }
  const whole = parts.join("\n");
  const capped = whole.length > cap;
  const text = capped
    ? `${cutCodePoints(whole, cap)}\n[result capped at ${cap} of ${whole.length} characters; ask for less, e.g. a smaller range]`
    : whole;
  return { text, isError: Boolean(result?.isError), capped, originalChars: whole.length };
}

function textPart(text) {
  if (isBlob(text)) {
    return blobNote(text);
  }
  // A JSON text (the runtime's tools answer JSON) is scrubbed as a value, so a blob inside it
  // becomes a note instead of being cut in the middle.
  const trimmed = text.trimStart();
  if (trimmed.startsWith("{") || trimmed.startsWith("[")) {
    try {
      return JSON.stringify(scrub(JSON.parse(text)));
    } catch {
      // not JSON after all
    }
  }
  return text;
}
