// Everything the bridge knows about chat.deepseek.com's page, in one place: the composer
// `textarea#chat-input`, the send button `[role="button"][aria-label="Send"]` (a div with
// `aria-disabled` while empty), the stop button `[aria-label="Stop"]` while a reply is
// generating, messages `.ds-message` (an assistant one holds `.ds-markdown`), and the
// conversation id from the route `/a/chat/s/<session id>` (never a tab id). These selectors
// follow the imitation in tests/fixtures/extension/deepseek.html; the live site may differ and
// then only this file changes.

import { makeAdapter } from "./site-dom.js";

const ROUTE = /^\/a\/chat\/s\/([A-Za-z0-9_-]{1,128})\/?$/;

export const adapter = makeAdapter({
  name: "deepseek",
  composer: "textarea#chat-input",
  send: '[role="button"][aria-label="Send"]',
  isGenerating: () => document.querySelector('[aria-label="Stop"]') !== null,
  messages: () =>
    [...document.querySelectorAll(".ds-message")].map((element) => ({
      role: element.querySelector(".ds-markdown") ? "assistant" : "user",
      text: (element.querySelector(".ds-markdown") ?? element).innerText.trim(),
      element,
    })),
  conversationId: (where) => where.pathname.match(ROUTE)?.[1] ?? null,
});
