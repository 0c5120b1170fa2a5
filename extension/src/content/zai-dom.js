// Everything the bridge knows about chat.z.ai's page (an Open WebUI fork, Svelte), in one place.
// Each selector accepts the imitation's form (tests/fixtures/extension/zai.html) and, where public
// evidence says the live site differs, the live form as well. Evidence (extension/README.md,
// "Live-site selectors: evidence"):
// - composer `textarea#chat-input`, send `#send-message-button` (disabled while the composer is
//   empty), route `/c/<chat_id>` (the root page `/` has no id yet; z.ai moves to `/c/<chat_id>`
//   after the first message): verified (open-webui/open-webui src/lib/components/chat/
//   MessageInput.svelte; two third-party z.ai adapters of 2026 that say they were checked against
//   the live app). Open WebUI's rich-text composer is a contenteditable `#chat-input`: accepted too
//   (plausible for z.ai).
// - messages `.chat-user` / `.chat-assistant` in page order: plausible (Open WebUI's
//   UserMessage/ResponseMessage render `chat-{message.role}`; one third-party z.ai adapter uses
//   them). The live rows `#messages-container [id^="message-"]` (user rows `.user-message`) are
//   read when the page has no `.chat-*` element (third-party, "verified against the live app").
// - a reply generating: the imitation's `#stop-response-button` / `button[aria-label="Stop"]`
//   are NOT backed by evidence (Open WebUI's stop button has neither; third-party z.ai adapters
//   say z.ai shows no stable stop button). Live signal added: the newest message row is an
//   assistant's that does not yet show its action bar (`.copy-response-button` /
//   `.regenerate-response-button`), which Open WebUI renders only once the reply is done
//   (plausible: Open WebUI source and a third-party z.ai adapter that says it was checked live).
//   Both signals are backed by stabilisation in bridge-main.js (a reply's calls run only after its
//   text and code stayed unchanged for a quiet period), so a page where neither matches still
//   never has a call run mid-stream.
// - code blocks (where the bridge's calls are read): Open WebUI's CodeBlock.svelte renders each
//   fenced block as a CodeEditor, a CodeMirror 6 editor (open-webui/open-webui 003968f,
//   src/lib/components/chat/Messages/CodeBlock.svelte: a `language-<lang>` box holding the
//   editor, a `.copy-code-button`); MCP-SuperAssistant (srbhptl39/MCP-SuperAssistant c26168e,
//   pages/content/src/render_prescript/src/core/config.ts) reads chat.z.ai's code through
//   CodeMirror (`useCodeMirrorExtraction`, `.cm-editor` / `.cm-content` in
//   chrome-extension/public/codemirror-accessor.js). CodeMirror 6's DOM: `.cm-editor >
//   .cm-scroller > .cm-content > .cm-line` (one element per document line; an index hit reads a
//   document as the `.cm-line` texts joined by newlines). A content script cannot reach the
//   editor's state (`cmView` lives in the page's world), so the text is the lines' text:
//   plausible. CodeMirror draws only the lines near the viewport of a long document; a call
//   block is short. A plain `pre` is read when there is no editor.

import { makeAdapter } from "./site-dom.js";

const ROUTE = /^\/c\/([A-Za-z0-9_-]{1,128})\/?$/;
const STOP = '#stop-response-button, button[aria-label="Stop"]';
const ROW = '#messages-container [id^="message-"]:not([id$="-start"])';
const DONE_ACTIONS = ".copy-response-button, .regenerate-response-button";

/** Message rows of the live layout (`message-<uuid>` ids), outermost only. */
function liveRows() {
  return [...document.querySelectorAll(ROW)].filter((row) => !row.parentElement?.closest(ROW));
}

/** The texts of the code blocks in `element`: CodeMirror editors line by line, else `pre` elements. */
function codeBlocks(element) {
  const blocks = [];
  for (const editor of element.querySelectorAll(".cm-editor")) {
    const lines = [...editor.querySelectorAll(".cm-content .cm-line")].map((line) => line.textContent);
    blocks.push(lines.join("\n"));
  }
  for (const pre of element.querySelectorAll("pre")) {
    if (!pre.closest(".cm-editor")) {
      blocks.push(pre.textContent);
    }
  }
  return blocks;
}

function messages() {
  const marked = [...document.querySelectorAll(".chat-user, .chat-assistant")];
  if (marked.length > 0) {
    return marked.map((element) => ({
      role: element.classList.contains("chat-user") ? "user" : "assistant",
      text: element.innerText.trim(),
      code: codeBlocks(element),
      element,
    }));
  }
  return liveRows().map((element) => {
    const content = element.querySelector("#response-content-container") ?? element;
    return {
      role: element.classList.contains("user-message") ? "user" : "assistant",
      text: content.innerText.trim(),
      code: codeBlocks(content),
      element,
    };
  });
}

/** The newest live message row is an assistant's still without its "done" action bar. */
function replyUnfinished() {
  const last = liveRows().at(-1);
  return last !== undefined && !last.classList.contains("user-message") && last.querySelector(DONE_ACTIONS) === null;
}

export const adapter = makeAdapter({
  name: "zai",
  composer: 'textarea#chat-input, #chat-input[contenteditable="true"]',
  send: "#send-message-button",
  isGenerating: () => document.querySelector(STOP) !== null || replyUnfinished(),
  messages,
  conversationId: (where) => where.pathname.match(ROUTE)?.[1] ?? null,
});
