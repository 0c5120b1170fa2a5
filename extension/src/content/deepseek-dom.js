// Everything the bridge knows about chat.deepseek.com's page, in one place. Each selector accepts
// the imitation's form (tests/fixtures/extension/deepseek.html) and, where public evidence says the
// live site differs, the live form as well. Evidence (extension/README.md, "Live-site selectors:
// evidence"):
// - route `/a/chat/s/<session id>` (a UUID; never a tab id): verified (copytht/ds-, live captures
//   of 2026-10-04 and sidebar rows `a[href^="/a/chat/s/"]` of 2026-10-07).
// - composer `textarea#chat-input`: plausible (HIllya51/LunaTranslator dev_deepseek.py,
//   adamlui/ai-web-extensions deepseek-omnibox); copytht/ds- (2026-10) reads any `textarea`,
//   accessible name "给 DeepSeek 发送消息", so a textarea whose placeholder names DeepSeek is
//   accepted as well.
// - send and stop: the imitation has a `[role="button"][aria-label="Send"]` and an
//   `[aria-label="Stop"]`. Live (copytht/ds- captures of 2026-10-04/05): ONE circle button
//   `div[role="button"].ds-button--primary.ds-button--filled.ds-button--circle`, empty aria-label,
//   disabled by the class `ds-button--disabled`, whose icon path says what it does: an arrow
//   (`d` starting "M8.3125 0.980206") = send, a square = stop, a `.ds-loading` spinner while
//   thinking. adamlui/ai-web-extensions selects send the same way (`:has([d^="M8.3125"])`) but
//   reads `aria-disabled` (disagreement; both are honoured). This adapter clicks the circle only
//   while it shows the arrow, and takes any other circle icon as a reply generating: a changed
//   icon makes the page look busy (nothing typed) rather than have Stop clicked.
// - messages `.ds-message`: verified (copytht/ds-). The assistant's answer is
//   `.ds-assistant-message-main-content` (also `.ds-markdown`); a reasoning block
//   `.ds-think-content` (holding its own `.ds-markdown`) sits beside it and is not the answer; a
//   user's text is `.ds-collapsible-text` (copytht/ds-, 2026-10-02/04). The imitation's assistant
//   is a bare `.ds-markdown`. The list is virtualised live: only rows near the viewport are in the
//   DOM (see the README for what that means for confirmation and positions).
// - code blocks (where the bridge's calls are read): `.md-code-block`, a banner
//   (`.md-code-block-banner-wrap > .md-code-block-banner`: the language in
//   `.md-code-block-infostring`, a `.ds-markdown-code-copy-button` "复制"/"Copy") and a `pre`
//   holding the code with syntax-highlight spans (no `code` element): plausible (index hits
//   without a named repository: a page saved from DeepSeek with this markup, two DeepSeek export
//   scripts reading `.md-code-block-infostring` and `pre` textContent; MCP-SuperAssistant c26168e
//   render_prescript config reads `pre` / `code` on chat.deepseek.com). Read: each `pre` of the
//   answer (its textContent), whether or not inside `.md-code-block`.

import { makeAdapter } from "./site-dom.js";

const ROUTE = /^\/a\/chat\/s\/([A-Za-z0-9_-]{1,128})\/?$/;
const CIRCLE = 'div[role="button"].ds-button--primary.ds-button--filled.ds-button--circle';
const SEND_ARROW = "M8.3125 0.980206";

/** The live circle button while it shows the send arrow and is not disabled. */
const LIVE_SEND = `${CIRCLE}:not(.ds-button--disabled):not([aria-disabled="true"]):has(svg path[d^="${SEND_ARROW}"])`;

/** The live circle button shows something other than the send arrow (the stop square, a spinner). */
function circleBusy() {
  const circle = document.querySelector(CIRCLE);
  if (circle === null) {
    return false;
  }
  const icon = circle.querySelector("svg path")?.getAttribute("d") ?? "";
  return !icon.startsWith(SEND_ARROW);
}

/** The answer of an assistant message: its main content, else a `.ds-markdown` outside the reasoning block. */
function answerOf(element) {
  return (
    element.querySelector(".ds-assistant-message-main-content") ??
    [...element.querySelectorAll(".ds-markdown")].find((markdown) => !markdown.closest(".ds-think-content")) ??
    null
  );
}

function messages() {
  return [...document.querySelectorAll(".ds-message")].map((element) => {
    const main = element.querySelector(".ds-assistant-message-main-content");
    const userText = main === null ? element.querySelector(".ds-collapsible-text") : null;
    if (userText !== null) {
      return { role: "user", text: userText.innerText.trim(), code: [], element };
    }
    if (main !== null || element.querySelector(".ds-think-content, .ds-markdown") !== null) {
      // An assistant's message; while only its reasoning shows, its answer is still empty.
      const answer = answerOf(element);
      const code = answer ? [...answer.querySelectorAll("pre")].filter((pre) => !pre.closest(".ds-think-content")).map((pre) => pre.textContent) : [];
      return { role: "assistant", text: answer ? answer.innerText.trim() : "", code, element };
    }
    return { role: "user", text: element.innerText.trim(), code: [], element };
  });
}

export const adapter = makeAdapter({
  name: "deepseek",
  composer: 'textarea#chat-input, textarea[placeholder*="DeepSeek"]',
  send: `[role="button"][aria-label="Send"], ${LIVE_SEND}`,
  isGenerating: () => document.querySelector('[aria-label="Stop"]') !== null || circleBusy(),
  messages,
  conversationId: (where) => where.pathname.match(ROUTE)?.[1] ?? null,
});
