// The side panel: the current page (ChatGPT, z.ai or DeepSeek) and its binding, and binding it to
// a workspace from the runtime's live list (/push/state); below it the one list of workspaces,
// each with its state, panes and agents, and the pinned target (control.js). The workspaces were
// listed twice before: here with their agents and again in the Control Center's tree; the tree
// holds everything the first list showed, so it is the only one. Texts: lib/i18n.js.

import { localize, t } from "../lib/i18n.js";
import { ControlPanel } from "./control.js";

localize(document);

const $ = (id) => document.getElementById(id);
const control = new ControlPanel();
const REFRESH_MS = 2_000;

async function activeTabId() {
  try {
    const [tab] = await chrome.tabs.query({ active: true, lastFocusedWindow: true });
    return tab?.id ?? null;
  } catch {
    return null;
  }
}

async function ask(message) {
  const answer = await chrome.runtime.sendMessage({ ...message, tabId: await activeTabId() });
  if (answer?.error) {
    throw new Error(answer.error.message);
  }
  return answer;
}

async function refresh() {
  let state;
  try {
    state = await ask({ type: "panel.state" });
  } catch (error) {
    $("connection").textContent = t("panelError", error.message);
    return;
  }
  control.update(state.workspaces);
  $("connection").textContent = state.connected ? t("panelConnected") : t("panelNotConnected");
  const page = state.tab?.page;
  $("scope").textContent = page ? pageName(page) : t("panelNoPage");
  $("scope").title = page?.scope ?? "";
  const binding = state.tab?.binding;
  const name = binding ? binding.label || binding.workspace_id : "";
  $("binding").textContent = binding
    ? binding.active_conv_key
      ? t("panelBoundActive", name, binding.workspace_id, binding.active_conv_key)
      : t("panelBound", name, binding.workspace_id)
    : page ? t("panelNotBound") : "";
  const select = $("workspace");
  const chosen = select.value || binding?.workspace_id || "";
  select.replaceChildren(
    ...state.workspaces.map((workspace) => {
      const option = document.createElement("option");
      option.value = workspace.workspace_id;
      option.textContent = `${workspace.label} (${workspace.workspace_id})`;
      return option;
    }),
  );
  if (chosen) {
    select.value = chosen;
  }
  $("bind").disabled = !page || state.workspaces.length === 0;
  $("unbind").disabled = !binding;
}

const SITES = { chatgpt: "ChatGPT", zai: "z.ai", deepseek: "DeepSeek" };

/** The page in words: "ChatGPT conversation", "z.ai new chat"... (its scope in the tooltip). */
function pageName(page) {
  const site = SITES[page.site] ?? page.site ?? "";
  const kind = { conv: "panelPageConversation", project: "panelPageProject", root: "panelPageRoot" }[page.kind];
  return kind ? t(kind, site) : page.scope;
}

async function bind(workspaceId) {
  try {
    const { binding } = await ask({ type: "panel.bind", workspaceId });
    $("message").textContent = binding ? t("panelBoundTo", binding.label || binding.workspace_id) : t("panelUnbound");
  } catch (error) {
    $("message").textContent = t("panelError", error.message);
  }
  await refresh();
}

$("bind").addEventListener("click", () => bind($("workspace").value));
$("unbind").addEventListener("click", () => bind(null));
control.start().then(refresh);
setInterval(refresh, REFRESH_MS);
