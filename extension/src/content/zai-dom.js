// Everything the bridge knows about chat.z.ai's page (an Open WebUI-style app), in one place:
// the composer `textarea#chat-input`, the send button `#send-message-button`, a stop button
// (`#stop-response-button` or `button[aria-label="Stop"]`) while a reply is generating, user
// messages `.chat-user`, assistant messages `.chat-assistant` (in page order), and the
// conversation id from the route `/c/<chat_id>`. The root page `/` has no id yet: z.ai moves to
// `/c/<chat_id>` after the first message. These selectors follow the imitation in
// tests/fixtures/extension/zai.html; the live site may differ and then only this file changes.

import { makeAdapter } from "./site-dom.js";

const ROUTE = /^\/c\/([A-Za-z0-9_-]{1,128})\/?$/;

export const adapter = makeAdapter({
  name: "zai",
  composer: "textarea#chat-input",
  send: "#send-message-button",
  isGenerating: () => document.querySelector('#stop-response-button, button[aria-label="Stop"]') !== null,
  messages: () =>
    [...document.querySelectorAll(".chat-user, .chat-assistant")].map((element) => ({
      role: element.classList.contains("chat-user") ? "user" : "assistant",
      text: element.innerText.trim(),
      element,
    })),
  conversationId: (where) => where.pathname.match(ROUTE)?.[1] ?? null,
});
