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

import { makeAdapter } from "./site-dom.js";

const ROUTE = /^\/c\/([A-Za-z0-9_-]{1,128})\/?$/;
const STOP = '#stop-response-button, button[aria-label="Stop"]';
const ROW = '#messages-container [id^="message-"]:not([id$="-start"])';
const DONE_ACTIONS = ".copy-response-button, .regenerate-response-button";

/** Message rows of the live layout (`message-<uuid>` ids), outermost only. */
function liveRows() {
  return [...document.querySelectorAll(ROW)].filter((row) => !row.parentElement?.closest(ROW));
}

function messages() {
  const marked = [...document.querySelectorAll(".chat-user, .chat-assistant")];
  if (marked.length > 0) {
    return marked.map((element) => ({
      role: element.classList.contains("chat-user") ? "user" : "assistant",
      text: element.innerText.trim(),
      element,
    }));
  }
  return liveRows().map((element) => ({
    role: element.classList.contains("user-message") ? "user" : "assistant",
    text: (element.querySelector("#response-content-container") ?? element).innerText.trim(),
    element,
  }));
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
