// The bridge's protocol with a web model that has no MCP connector (z.ai, DeepSeek): the prompt
// that teaches it (generated from the live tools/list, never a fixed tool list), the tool-call
// lines it answers with, the TOOL_RESULT message it gets back, and the rules for what runs:
// rounds per user turn, parallel or in order, and what a reloaded page may re-run.

import { validate } from "./bridge-schema.js";

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
    'To call a tool, put one line per call in your reply, each line exactly one JSON object: {"tool": "<tool name>", "args": {<arguments>}}',
    "Write nothing else on a call line, and no code fence around it. Calls in one reply run in the order written;",
    `they may run in parallel when every one of them only reads. Wait for the results: they come in a message starting "${RESULT_HEADER}",`,
    `one block per call ("[n] <tool> ok" or "[n] <tool> error"). At most ${MAX_ROUNDS} rounds of calls per message of the person;`,
    `at most ${MAX_CALLS_PER_REPLY} calls per reply. Arguments must follow each tool's input schema. Long results are cut; ask for less.`,
    "When you need no tool, answer normally without call lines.",
    "",
    "Tools:",
  ];
  for (const tool of tools) {
    const description = (tool.description ?? "").replace(/\s+/g, " ").trim();
    const shown = description.length > DESCRIPTION_CHARS ? `${description.slice(0, DESCRIPTION_CHARS)}...` : description;
    lines.push(`- ${tool.name}: ${shown}`);
    lines.push(`  input schema: ${JSON.stringify(tool.inputSchema ?? { type: "object" })}`);
  }
  return lines.join("\n");
}

/** True when `text` (a user message) is the protocol prompt. */
export function isPrompt(text) {
  return typeof text === "string" && text.trimStart().startsWith(MARKER);
}

/** True when `text` (a user message) is a TOOL_RESULT message. */
export function isResult(text) {
  return typeof text === "string" && text.trimStart().startsWith(RESULT_HEADER);
}

/**
 * The tool calls in a model reply: every line that is exactly a JSON object with a string
 * `tool` and an object `args` (absent `args` is `{}`), and no other key. Other lines are the
 * model's prose. Returns `{ calls: [{tool, args, line}], errors: [string] }`; a line that looks
 * like a call (starts with `{"tool"`) but is not one is an error the model is told about.
 */
export function parseCalls(text) {
  const calls = [];
  const errors = [];
  for (const raw of String(text ?? "").split(/\r?\n/)) {
    const line = raw.trim();
    const looksLikeCall = /^\{\s*"tool"\s*:/.test(line);
    if (!looksLikeCall && (!line.startsWith("{") || !line.endsWith("}"))) {
      continue;
    }
    let value;
    try {
      value = JSON.parse(line);
    } catch {
      if (looksLikeCall) {
        errors.push(`not JSON: ${line.slice(0, 120)}`);
      }
      continue;
    }
    if (value === null || typeof value !== "object" || Array.isArray(value) || !Object.hasOwn(value, "tool")) {
      continue;
    }
    const extra = Object.keys(value).filter((key) => key !== "tool" && key !== "args");
    const args = value.args ?? {};
    if (typeof value.tool !== "string" || !value.tool) {
      errors.push(`"tool" must be a tool name: ${line.slice(0, 120)}`);
    } else if (extra.length > 0) {
      errors.push(`${value.tool}: unknown keys ${JSON.stringify(extra)}; a call line has only "tool" and "args"`);
    } else if (args === null || typeof args !== "object" || Array.isArray(args)) {
      errors.push(`${value.tool}: "args" must be an object`);
    } else {
      calls.push({ tool: value.tool, args, line });
    }
  }
  return { calls, errors };
}

/** True when every non-empty line of a reply is a call line (the reply is folded in the page). */
export function isCallsOnly(text) {
  const lines = String(text ?? "").split(/\r?\n/).map((line) => line.trim()).filter(Boolean);
  if (lines.length === 0) {
    return false;
  }
  const { calls } = parseCalls(text);
  return calls.length === lines.filter((line) => !line.startsWith("```")).length;
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
  if (!last || last.role !== "assistant" || parseCalls(last.text).calls.length === 0) {
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
