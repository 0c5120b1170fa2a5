// The bridge's protocol with a web model that has no MCP connector (z.ai, DeepSeek): the prompt
// that teaches it (generated from the live tools/list, never a fixed tool list), the tool-call
// blocks it answers with, the TOOL_RESULT message it gets back, and the rules for what runs:
// rounds per user turn, parallel or in order, and what a reloaded page may re-run.

import { validate } from "./bridge-schema.js";
import { cutCodePoints } from "./text.js";

/** The versioned marker: in the prompt's first line and in every TOOL_RESULT message. */
export const MARKER = "HERDR_BRIDGE_V1";
export const RESULT_HEADER = `TOOL_RESULT ${MARKER}`;
/** Rounds (a model reply with calls, answered by one TOOL_RESULT) per user turn. */
export const MAX_ROUNDS = 8;
/** Calls taken from one model reply; more are answered with an error, not run. */
export const MAX_CALLS_PER_REPLY = 8;
const DESCRIPTION_CHARS = 400;

/** The protocol prompt for `tools` (tools/list's `tools`). */
export function protocolPrompt(tools) {
  const lines = [
    MARKER,
    "You can use the tools of the person's local workstation (herdr-mcp) through a bridge in their browser.",
    "To call tools, put a fenced code block marked json in your reply holding one JSON object per call:",
    "```json",
    '{"tool": "<tool name>", "args": {<arguments>}}',
    "```",
    "An object may span several lines (pretty-printed JSON is fine); start each call on a new line; one block or several.",
    "A call outside a fenced code block is NOT run (the page renders your reply as Markdown, which can change it).",
    `Calls in one reply run in the order written; they may run in parallel when every one of them only reads.`,
    `Wait for the results: they come in a message starting "${RESULT_HEADER}", one block per call ("[n] <tool> ok" or "[n] <tool> error").`,
    `At most ${MAX_ROUNDS} rounds of calls per message of the person; at most ${MAX_CALLS_PER_REPLY} calls per reply.`,
    "Arguments must follow each tool's input schema. Long results are cut; ask for less.",
    "When you need no tool, answer normally without a json call block.",
    "",
    "Tools:",
  ];
  for (const tool of tools) {
    const description = (tool.description ?? "").replace(/\s+/g, " ").trim();
    const shown = cutCodePoints(description, DESCRIPTION_CHARS + 3, { ellipsis: "..." });
    lines.push(`- ${tool.name}: ${shown}`);
    lines.push(`  input schema: ${JSON.stringify(tool.inputSchema ?? { type: "object" })}`);
  }
  return lines.join("\n");
}

/** The short reminder of the call form (a wake or continue on a bridged conversation may name it). */
export const CALL_FORM_HINT = 'Use the Herdr tools as the protocol prompt says: a fenced ```json code block with one {"tool": ..., "args": {...}} object per call.';

/** True when `text` (a user message) is the protocol prompt. */
export function isPrompt(text) {
  return typeof text === "string" && text.trimStart().startsWith(MARKER);
}

/** True when `text` (a user message) is a TOOL_RESULT message. */
export function isResult(text) {
  return typeof text === "string" && text.trimStart().startsWith(RESULT_HEADER);
}

const LOOKS_LIKE_CALL = /^\{\s*"tool"\s*:/;
const FENCE = /^ {0,3}(`{3,}|~{3,})(.*)$/;

/**
 * The fenced code blocks of a reply's raw Markdown text (used when the page gives no code
 * elements, e.g. the unit tests or a page that shows the raw text): the contents of each block.
 */
export function fencedBlocks(text) {
  const blocks = [];
  let open = null;
  for (const line of String(text ?? "").split(/\r?\n/)) {
    const fence = line.match(FENCE);
    if (open === null) {
      if (fence && !(fence[1][0] === "`" && fence[2].includes("`"))) {
        open = { marker: fence[1], lines: [] };
      }
    } else if (fence && fence[1][0] === open.marker[0] && fence[1].length >= open.marker.length && fence[2].trim() === "") {
      blocks.push(open.lines.join("\n"));
      open = null;
    } else {
      open.lines.push(line);
    }
  }
  if (open !== null) {
    blocks.push(open.lines.join("\n")); // an unclosed fence runs to the end (CommonMark)
  }
  return blocks;
}

/**
 * The end (exclusive) of the JSON object starting at `text[start]` ("{"), by bracket depth outside
 * strings, or -1 when the text ends first (JSON cut midway).
 */
function objectEnd(text, start) {
  let depth = 0;
  let inString = false;
  for (let at = start; at < text.length; at += 1) {
    const char = text[at];
    if (inString) {
      if (char === "\\") {
        at += 1;
      } else if (char === '"') {
        inString = false;
      }
    } else if (char === '"') {
      inString = true;
    } else if (char === "{" || char === "[") {
      depth += 1;
    } else if (char === "}" || char === "]") {
      depth -= 1;
      if (depth === 0) {
        return at + 1;
      }
    }
  }
  return -1;
}

const shorten = (text) => cutCodePoints(text.replace(/\s+/g, " ").trim(), 120);

/** One call object's value checked: `{call}` or `{error}`. */
function callOf(value, source) {
  if (value === null || typeof value !== "object" || Array.isArray(value) || !Object.hasOwn(value, "tool")) {
    return { error: `not a call (an object with "tool" and "args"): ${shorten(source)}` };
  }
  const extra = Object.keys(value).filter((key) => key !== "tool" && key !== "args");
  const args = value.args ?? {};
  if (typeof value.tool !== "string" || !value.tool) {
    return { error: `"tool" must be a tool name: ${shorten(source)}` };
  }
  if (extra.length > 0) {
    return { error: `${value.tool}: unknown keys ${JSON.stringify(extra)}; a call has only "tool" and "args"` };
  }
  if (args === null || typeof args !== "object" || Array.isArray(args)) {
    return { error: `${value.tool}: "args" must be an object` };
  }
  return { call: { tool: value.tool, args, line: source } };
}

/**
 * The calls of one code block: JSON objects separated by whitespace, each starting on a line of
 * its own (pretty-printed over several lines or not). A block that does not mention "tool" is
 * someone's code (or data), not calls. Anything else that is not a well-formed
 * call is an error (the rest of the block is not read): text between objects, two objects on one
 * line, an object cut midway, bad JSON.
 */
function blockCalls(block, calls, errors) {
  const text = String(block);
  const first = text.search(/\S/);
  if (first < 0 || !/"tool"\s*:/.test(text)) {
    return;
  }
  if (text[first] !== "{") {
    errors.push(`a call block holds only call objects: ${shorten(text.slice(first))}`);
    return;
  }
  let at = first;
  let previousEnd = -1;
  while (at < text.length) {
    const next = text.slice(at).search(/\S/);
    if (next < 0) {
      return;
    }
    at += next;
    if (text[at] !== "{") {
      errors.push(`text between calls (each call is a JSON object on its own lines): ${shorten(text.slice(at))}`);
      return;
    }
    if (previousEnd >= 0 && !text.slice(previousEnd, at).includes("\n")) {
      errors.push(`two calls on one line (start each call on a new line): ${shorten(text.slice(previousEnd - 1, at + 60))}`);
      calls.pop();
      return;
    }
    const end = objectEnd(text, at);
    if (end < 0) {
      errors.push(`not JSON (cut before its end): ${shorten(text.slice(at))}`);
      return;
    }
    const source = text.slice(at, end);
    let value;
    try {
      value = JSON.parse(source);
    } catch (error) {
      errors.push(`not JSON (${error.message}): ${shorten(source)}`);
      return;
    }
    const { call, error } = callOf(value, source);
    if (error) {
      errors.push(error);
    } else {
      calls.push(call);
    }
    previousEnd = end;
    at = end;
  }
}

/**
 * The tool calls in a model reply. `code`: the texts of the reply's code blocks as the page holds
 * them (the code element's text, which Markdown rendering does not alter); without it (or when
 * the page shows no code element), the fenced blocks of `text` taken as raw Markdown. Calls come only from code blocks. A line of the prose
 * that starts like a call (`{"tool"`) and is not a line of a code block is an error the model is
 * told about, never run: rendering may have changed it (underscores, HTML, backslashes, breaks).
 * Returns `{ calls: [{tool, args, line}], errors: [string] }`.
 */
export function parseCalls(text, code = null) {
  const calls = [];
  const errors = [];
  // A page that rendered the reply holds its blocks as code elements; a reply shown as plain text
  // (no code element) still has its fences as written.
  const blocks = Array.isArray(code) && code.length > 0 ? code.map(String) : fencedBlocks(text);
  for (const block of blocks) {
    blockCalls(block, calls, errors);
  }
  const codeLines = new Set(blocks.flatMap((block) => block.split(/\r?\n/).map((line) => line.trim())));
  const fenced = new Set(fencedBlocks(text).flatMap((block) => block.split(/\r?\n/).map((line) => line.trim())));
  for (const raw of String(text ?? "").split(/\r?\n/)) {
    const line = raw.trim();
    if (LOOKS_LIKE_CALL.test(line) && !codeLines.has(line) && !fenced.has(line)) {
      errors.push(`a call outside a fenced json code block is not run (the page's Markdown may have changed it): ${shorten(line)}`);
    }
  }
  return { calls, errors };
}

/** True when a reply is made only of call blocks (it is folded in the page). */
export function isCallsOnly(text, code = null) {
  const { calls, errors } = parseCalls(text, code);
  if (calls.length === 0 || errors.length > 0) {
    return false;
  }
  const blocks = Array.isArray(code) && code.length > 0 ? code : fencedBlocks(text);
  let rest = String(text ?? "");
  for (const block of blocks) {
    for (const line of String(block).split(/\r?\n/)) {
      rest = rest.replace(line, "");
    }
  }
  return rest.replace(/```\w*|~~~\w*/g, "").replace(/\b(json|copy|复制|Copy)\b/gi, "").trim() === "";
}

/**
 * Each call checked against tools/list: `{tool, args, error?, readOnly, schema}`. Unknown
 * tools and arguments outside the input schema get `error` and are not run.
 */
export function checkCalls(calls, tools) {
  const byName = new Map(tools.map((tool) => [tool.name, tool]));
  return calls.map((call, index) => {
    const tool = byName.get(call.tool);
    if (!tool) {
      return { ...call, index, readOnly: false, error: `unknown_tool: no tool named ${call.tool}` };
    }
    const problems = validate(tool.inputSchema ?? { type: "object" }, call.args);
    return {
      ...call,
      index,
      schema: tool.inputSchema,
      readOnly: tool.annotations?.readOnlyHint === true,
      error: problems.length ? `invalid_arguments: ${problems.slice(0, 5).join("; ")}` : undefined,
    };
  });
}

/** Calls of one reply run in parallel only when all of them are read-only; else in order. */
export function runsInParallel(checked) {
  return checked.length > 1 && checked.every((call) => call.readOnly);
}

/** The key property of a tool that takes an idempotency key (by its input schema), or null. */
export function idempotencyProperty(schema) {
  const properties = schema?.properties ?? {};
  return ["idempotency_key", "idempotencyKey"].find((name) => Object.hasOwn(properties, name)) ?? null;
}

/**
 * Rounds used in the current user turn: TOOL_RESULT messages after the person's last own
 * message. `messages` are `{role: "user"|"assistant", text}` in page order.
 */
export function roundsUsed(messages) {
  let rounds = 0;
  for (let i = messages.length - 1; i >= 0; i -= 1) {
    const message = messages[i];
    if (message.role !== "user") {
      continue;
    }
    if (isResult(message.text)) {
      rounds += 1;
    } else {
      break;
    }
  }
  return rounds;
}

/** True when the conversation holds the protocol prompt (the protocol context exists). */
export function hasContext(messages) {
  return messages.some((message) => message.role === "user" && isPrompt(message.text));
}

/**
 * After a page reload, whether the calls of the last message may be run: only when that message
 * is a model reply with calls, the protocol context exists, and either it was never dispatched
 * or every call is read-only (a mutation is never run twice). Returns `{run, reason}`.
 */
export function recoveryDecision({ messages, dispatched, checked }) {
  const last = messages.at(-1);
  const parsed = last ? parseCalls(last.text, last.code ?? null) : null;
  if (!last || last.role !== "assistant" || parsed.calls.length + parsed.errors.length === 0) {
    return { run: false, reason: "the last message is not a call" };
  }
  if (!hasContext(messages)) {
    return { run: false, reason: "no protocol context in this conversation" };
  }
  if (!dispatched) {
    return { run: true, reason: "never dispatched" };
  }
  if (checked.every((call) => call.readOnly)) {
    return { run: true, reason: "dispatched before, read-only" };
  }
  return { run: false, reason: "dispatched before and not read-only: a mutation is never re-run" };
}

/** The TOOL_RESULT message: one block per call, in call order. */
export function resultMessage(answers) {
  const blocks = [RESULT_HEADER];
  answers.forEach((answer, index) => {
    blocks.push(`[${index + 1}] ${answer.tool} ${answer.isError ? "error" : "ok"}`);
    blocks.push(answer.text);
  });
  return blocks.join("\n");
}

/**
 * What places message `index` of `messages` ([{text}], as the page shows them) without its
 * position: the text of the message before it, and how many earlier shown messages have the same
 * text after the same predecessor. A position would shift when a site stops rendering rows far
 * from the viewport (DeepSeek's list is said to), giving an old reply a new key, so its calls
 * could run again; this anchor stays, and when a dropped row does shift the count, the key falls
 * onto that of the identical earlier pair, which was dispatched already (never a fresh key).
 */
export function messageAnchor(messages, index) {
  const before = (at) => (at > 0 ? messages[at - 1].text : "");
  const previous = before(index);
  let same = 0;
  for (let at = 0; at < index; at += 1) {
    if (messages[at].text === messages[index].text && before(at) === previous) {
      same += 1;
    }
  }
  return `${same}\n${previous}`;
}

/** A stable key for a message: its conversation, its anchor (`messageAnchor`) and its text (SHA-256, hex). */
export async function messageKey(scope, anchor, text) {
  const data = new TextEncoder().encode(`${scope}\n${anchor}\n${text}`);
  const digest = await crypto.subtle.digest("SHA-256", data);
  return [...new Uint8Array(digest)].map((byte) => byte.toString(16).padStart(2, "0")).join("").slice(0, 32);
}
