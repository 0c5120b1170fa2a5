// The DOM mechanics shared by the site adapters (typing into a textarea the site's framework
// listens to, clicking send, waiting for the sent message to show) and by the two content
// scripts (main.js, bridge-main.js: the rest they last reported). What to select is each site's
// adapter's business (chatgpt-dom.js, zai-dom.js, deepseek-dom.js); nothing here names a site.

const CONFIRM_TIMEOUT_MS = 20_000;
const SEND_BUTTON_TIMEOUT_MS = 5_000;
/** A sent message is recognised by its first characters (a site may render the rest as markdown). */
const CONFIRM_PREFIX_CHARS = 200;

/** Whether the worker was last told this page is at rest, on the page's root (benchmarks/wake_bench.py waits on it). */
export function showRest(idle) {
  document.documentElement.dataset.herdrRest = String(idle);
}

export function normalize(text) {
  return String(text ?? "").replace(/\s+/g, " ").trim();
}

export function waitFor(check, timeoutMs) {
  return new Promise((resolve) => {
    const found = check();
    if (found) {
      resolve(found);
      return;
    }
    const observer = new MutationObserver(() => {
      const value = check();
      if (value) {
        finish(value);
      }
    });
    const timer = setTimeout(() => finish(null), timeoutMs);
    function finish(value) {
      observer.disconnect();
      clearTimeout(timer);
      resolve(value);
    }
    observer.observe(document.documentElement, { childList: true, subtree: true, attributes: true, characterData: true });
  });
}

/** Set a textarea's value the way typing does, so React-style frameworks see it. */
export function typeInto(element, text) {
  element.focus();
  if (element.tagName === "TEXTAREA" || element.tagName === "INPUT") {
    const setter = Object.getOwnPropertyDescriptor(Object.getPrototypeOf(element), "value")?.set;
    if (setter) {
      setter.call(element, text);
    } else {
      element.value = text;
    }
    element.dispatchEvent(new InputEvent("input", { bubbles: true, inputType: "insertText", data: text }));
    return;
  }
  document.execCommand("selectAll", false);
  if (!document.execCommand("insertText", false, text)) {
    element.textContent = text;
    element.dispatchEvent(new InputEvent("input", { bubbles: true, inputType: "insertText", data: text }));
  }
}

export function valueOf(element) {
  if (!element) {
    return "";
  }
  return (element.tagName === "TEXTAREA" || element.tagName === "INPUT" ? element.value : element.innerText).trim();
}

/**
 * An adapter from a site's `{composer, send, generating, messages, conversationId}`:
 * `messages()` -> `[{role, text, element}]` in page order, `send(text)` -> `{ok, reason?}`.
 */
export function makeAdapter(site) {
  const adapter = {
    name: site.name,
    conversationId: () => site.conversationId(location),
    composer: () => document.querySelector(site.composer),
    isGenerating: () => site.isGenerating(),
    messages: () => site.messages(),
    isIdle() {
      const composer = adapter.composer();
      return composer !== null && !adapter.isGenerating() && valueOf(composer) === "";
    },
    /** `confirmMs`: how long to wait for the sent message to show (the handoff seed waits for its marker instead). */
    async send(text, { confirmMs = CONFIRM_TIMEOUT_MS } = {}) {
      if (!adapter.isIdle()) {
        return { ok: false, reason: "busy" };
      }
      // Confirmed by a user message element that was not there before, not by a count: a site
      // that renders only the rows near the viewport (DeepSeek) may drop older ones meanwhile.
      const before = new Set(adapter.messages().map((message) => message.element));
      typeInto(adapter.composer(), text);
      const button = await waitFor(() => {
        const found = document.querySelector(site.send);
        return found && !found.disabled && found.getAttribute("aria-disabled") !== "true" ? found : null;
      }, SEND_BUTTON_TIMEOUT_MS);
      if (!button) {
        typeInto(adapter.composer(), "");
        return { ok: false, reason: "busy" };
      }
      button.click();
      const wanted = normalize(text).slice(0, CONFIRM_PREFIX_CHARS);
      const confirmed = await waitFor(
        () =>
          adapter
            .messages()
            .find((message) => message.role === "user" && !before.has(message.element) && normalize(message.text).startsWith(wanted)),
        confirmMs,
      );
      return confirmed ? { ok: true } : { ok: false, reason: "unconfirmed" };
    },
  };
  return adapter;
}
