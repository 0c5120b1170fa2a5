// Everything this extension knows about ChatGPT's page, in one place (the site changes its DOM;
// only this module follows it): the composer `#prompt-textarea` (contenteditable), the send
// button `[data-testid="send-button"]`, the stop button `[data-testid="stop-button"]` shown while
// a reply is generating, and turns `[data-message-author-role]` (with `data-message-id`).

export const SELECTORS = Object.freeze({
  composer: "#prompt-textarea",
  send: '[data-testid="send-button"]',
  stop: '[data-testid="stop-button"]',
  turn: "[data-message-author-role]",
});

const CONFIRM_TIMEOUT_MS = 20_000;
const SEND_BUTTON_TIMEOUT_MS = 5_000;

export function composer() {
  return document.querySelector(SELECTORS.composer);
}

export function isGenerating() {
  return document.querySelector(SELECTORS.stop) !== null;
}

export function composerText() {
  const element = composer();
  if (!element) {
    return "";
  }
  return ("value" in element && element.tagName === "TEXTAREA" ? element.value : element.innerText).trim();
}

/** Confirmed idle: a composer to type in, no reply generating, and no draft of the person's in it. */
export function isIdle() {
  return composer() !== null && !isGenerating() && composerText() === "";
}

export function turns() {
  return [...document.querySelectorAll(SELECTORS.turn)].map((element) => ({
    key: element.getAttribute("data-message-id") ?? "",
    role: element.getAttribute("data-message-author-role"),
    text: element.innerText.trim(),
  }));
}

export function title() {
  return document.title;
}

export function clearComposer() {
  const element = composer();
  if (!element) {
    return;
  }
  element.focus();
  document.execCommand("selectAll", false);
  document.execCommand("delete", false);
}

function typeInto(element, text) {
  element.focus();
  if (element.tagName === "TEXTAREA") {
    element.value = text;
    element.dispatchEvent(new InputEvent("input", { bubbles: true, inputType: "insertText", data: text }));
    return;
  }
  // The editor (ProseMirror) listens to input events; insertText goes through them as typing does.
  document.execCommand("selectAll", false);
  if (!document.execCommand("insertText", false, text)) {
    element.textContent = text;
    element.dispatchEvent(new InputEvent("input", { bubbles: true, inputType: "insertText", data: text }));
  }
}

const normalize = (text) => text.replace(/\s+/g, " ").trim();

function waitFor(check, timeoutMs) {
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

/**
 * Type `text` and send it. `{ok: true}` once a new user turn with this text shows in the page;
 * `{ok: false, reason: "busy"}` when the composer is not confirmed idle (nothing typed);
 * `{ok: false, reason: "unconfirmed"}` when it was typed or clicked but no such turn appeared.
 */
export async function send(text) {
  if (!isIdle()) {
    return { ok: false, reason: "busy" };
  }
  const before = new Set(turns().map((turn) => turn.key));
  typeInto(composer(), text);
  const button = await waitFor(() => {
    const found = document.querySelector(SELECTORS.send);
    return found && !found.disabled ? found : null;
  }, SEND_BUTTON_TIMEOUT_MS);
  if (!button) {
    clearComposer();
    return { ok: false, reason: "busy" };
  }
  button.click();
  const wanted = normalize(text);
  const confirmed = await waitFor(
    () => turns().find((turn) => turn.role === "user" && !before.has(turn.key) && normalize(turn.text) === wanted),
    CONFIRM_TIMEOUT_MS,
  );
  return confirmed ? { ok: true } : { ok: false, reason: "unconfirmed" };
}
