// Scopes (docs/browser-protocol.md section 2): which web conversation scope a page belongs to.
// Pure: no chrome.* here, so node --test can check it.

export const SCOPE_PATTERN = /^(chatgpt|zai|deepseek):(project|conv|root):[A-Za-z0-9._:-]{1,200}$/;
const CONVERSATION_ID = /^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/;
// ChatGPT appends a name slug to a project id (`g-p-<hex>-my-project`); the id is the prefix.
const CHATGPT_PROJECT = /^(g-p-[0-9a-f]+)(?:-.*)?$/;
// A custom GPT's path segment (`g-<id>-<slug>`, never `g-p-`): the GPT is not a scope of its own
// (many unrelated conversations use one GPT), so its conversations are conversation scopes.
const CHATGPT_GPT = /^g-(?!p-)[A-Za-z0-9]+(?:-.*)?$/;
const TAB_ID = /^[A-Za-z0-9._-]{1,64}$/;

export function isScope(value) {
  return typeof value === "string" && value.length <= 256 && SCOPE_PATTERN.test(value);
}

/**
 * What a ChatGPT page is, from its URL:
 * - `{kind: "conv", scope: "chatgpt:conv:<id>", convKey: <id>, projectId: null}` for /c/<id>;
 * - `{kind: "project", scope: "chatgpt:project:<p>", convKey: <id>, projectId: <p>}` for
 *   /g/<p>/c/<id> (a conversation inside a Project: the Project is the scope);
 * - `{kind: "project", ..., convKey: null}` for the Project's home /g/<p>/project;
 * - `{kind: "conv", scope: "chatgpt:conv:<id>", convKey: <id>, projectId: null}` for a custom
 *   GPT's conversation /g/g-<gpt id>-<slug>/c/<id> (the conversation is the scope, as for /c/<id>);
 * - `{kind: "root", scope: "chatgpt:root:<tabId>", convKey: null}` for the root page, when a
 *   tab-local id is given (a pending binding lives there until the tab lands on a conversation);
 * - `null` for anything else (settings, GPTs, unknown shapes).
 */
export function pageScope(href, tabId = null) {
  let url;
  try {
    url = new URL(href);
  } catch {
    return null;
  }
  if (url.protocol !== "https:" || url.port) {
    return null;
  }
  const path = url.pathname.split("/").filter(Boolean);
  const bridged = BRIDGE_SITES[url.hostname];
  if (bridged) {
    return bridgePage(bridged, path, tabId);
  }
  if (url.hostname !== "chatgpt.com") {
    return null;
  }
  if (path.length === 0) {
    if (tabId === null || !TAB_ID.test(tabId)) {
      return null;
    }
    return { site: "chatgpt", kind: "root", scope: `chatgpt:root:${tabId}`, convKey: null, projectId: null };
  }
  if (path.length === 2 && path[0] === "c" && CONVERSATION_ID.test(path[1])) {
    return { site: "chatgpt", kind: "conv", scope: `chatgpt:conv:${path[1]}`, convKey: path[1], projectId: null };
  }
  if (path[0] === "g" && path.length === 4 && CHATGPT_GPT.test(path[1]) && path[2] === "c" && CONVERSATION_ID.test(path[3])) {
    return { site: "chatgpt", kind: "conv", scope: `chatgpt:conv:${path[3]}`, convKey: path[3], projectId: null, gpt: path[1] };
  }
  if (path[0] === "g" && path.length >= 3) {
    const match = CHATGPT_PROJECT.exec(path[1]);
    if (!match) {
      return null;
    }
    const projectId = match[1];
    const scope = `chatgpt:project:${projectId}`;
    if (path.length === 3 && path[2] === "project") {
      return { site: "chatgpt", kind: "project", scope, convKey: null, projectId };
    }
    if (path.length === 4 && path[2] === "c" && CONVERSATION_ID.test(path[3])) {
      return { site: "chatgpt", kind: "project", scope, convKey: path[3], projectId };
    }
  }
  return null;
}

// The bridge's sites (content/zai-dom.js, deepseek-dom.js): a conversation scope per chat id,
// the root page a tab-local pending scope, nothing else. Their conversation pages' paths.
const BRIDGE_SITES = { "chat.z.ai": "zai", "chat.deepseek.com": "deepseek" };
const BRIDGE_PREFIX = { zai: ["c"], deepseek: ["a", "chat", "s"] };
const BRIDGE_HOME = { zai: "https://chat.z.ai/", deepseek: "https://chat.deepseek.com/" };

function bridgePage(site, path, tabId) {
  const prefix = BRIDGE_PREFIX[site];
  if (path.length === 0) {
    return tabId !== null && TAB_ID.test(tabId) ? { site, kind: "root", scope: `${site}:root:${tabId}`, convKey: null, projectId: null } : null;
  }
  const id = path[prefix.length];
  if (path.length === prefix.length + 1 && prefix.every((part, index) => path[index] === part) && CONVERSATION_ID.test(id)) {
    return { site, kind: "conv", scope: `${site}:conv:${id}`, convKey: id, projectId: null };
  }
  return null;
}

/** Where a new conversation of `site` starts (a handoff's target page outside a Project). */
export function newConversationUrl(site) {
  return BRIDGE_HOME[site] ?? "https://chatgpt.com/";
}

/** The full URL of a conversation (what the continuity journal takes as `conversation_url`). */
export function conversationUrl(page) {
  if (!page || !page.convKey) {
    return null;
  }
  if (BRIDGE_PREFIX[page.site]) {
    return `${BRIDGE_HOME[page.site]}${BRIDGE_PREFIX[page.site].join("/")}/${page.convKey}`;
  }
  if (page.projectId) {
    return `https://chatgpt.com/g/${page.projectId}/c/${page.convKey}`;
  }
  if (page.gpt) {
    return `https://chatgpt.com/g/${page.gpt}/c/${page.convKey}`;
  }
  return `https://chatgpt.com/c/${page.convKey}`;
}

/**
 * The conversation a scope's wakes and progress go to: the conversation itself for a
 * conversation scope, the binding's `active_conv_key` for a Project, nothing for a root scope.
 */
export function wakeTarget(scope, binding) {
  if (!isScope(scope)) {
    return null;
  }
  const [, , kind, id] = /^([a-z]+):(project|conv|root):(.+)$/.exec(scope);
  if (kind === "conv") {
    return id;
  }
  if (kind === "project") {
    return binding && binding.active_conv_key ? binding.active_conv_key : null;
  }
  return null;
}
