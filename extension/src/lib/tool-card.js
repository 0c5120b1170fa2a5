// Which ChatGPT tool-confirmation card the extension may accept by itself (seed 000: the Herdr
// tool permission card is accepted even with Auto off; fail closed: only a card of this
// connector's own tools). Pure: content/chatgpt-dom.js reads the card into `{labels, images,
// buttons}` and this decides. Evidence for the card's shape (extension/README.md, "Live-site
// selectors: evidence"): the card is `[data-testid="tool-approval-card"]` or a `[role="dialog"]`,
// it names the connector (an `img[alt]` or its own line) and the tool, and offers Deny, Allow
// (once; earlier "Allow once") and "Always allow" (for this conversation).

/** The one-time accept labels, English (evidence) and Chinese (no public evidence: unverified). */
const ALLOW_ONCE = new Set(["allow", "allow once", "允许", "允许一次", "仅允许一次"]);

function clean(text) {
  return String(text ?? "")
    .replace(/\s+/g, " ")
    .trim();
}

/** The accept-once button's index among `buttons` (their labels), or -1 (never "Always allow"). */
export function allowOnceIndex(buttons) {
  return buttons.findIndex((label) => ALLOW_ONCE.has(clean(label).toLowerCase()));
}

/**
 * `card`: `{labels: [the card's own short texts, outside code and argument blocks], images: [alt
 * texts], buttons: [button labels]}`; `connector`: the name the person gave the Herdr connector in
 * ChatGPT; `tools`: the tool names of the live catalog. Answers `{ours: true, tool, allow}` (the
 * button index to press) only when the connector's name is one of the card's own labels or image
 * names, exactly one catalog tool is named by a label of its own, and an accept-once button is
 * there; otherwise `{ours: false, reason}`.
 */
export function classifyCard(card, { connector, tools }) {
  const name = clean(connector).toLowerCase();
  if (!name) {
    return { ours: false, reason: "no connector name is known" };
  }
  if (!Array.isArray(tools) || tools.length === 0) {
    return { ours: false, reason: "the tool catalog is not known yet" };
  }
  const labels = (card.labels ?? []).map((label) => clean(label));
  const named = [...labels, ...(card.images ?? []).map((alt) => clean(alt))].some((label) => label.toLowerCase() === name);
  if (!named) {
    return { ours: false, reason: "the card does not name this connector" };
  }
  const catalog = new Set(tools);
  const shown = [...new Set(labels.filter((label) => catalog.has(label)))];
  if (shown.length !== 1) {
    return { ours: false, reason: shown.length === 0 ? "the card names no tool of the catalog" : "the card names several tools" };
  }
  const allow = allowOnceIndex(card.buttons ?? []);
  if (allow < 0) {
    return { ours: false, reason: "no Allow button on the card" };
  }
  return { ours: true, tool: shown[0], allow };
}
