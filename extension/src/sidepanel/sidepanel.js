// The side panel: the current ChatGPT page's scope and binding, binding it to a workspace from
// the runtime's live list (/push/state), and that list with each workspace's state; below it the
// Control Center (control.js).

import { ControlPanel } from "./control.js";

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
    $("connection").textContent = `Error: ${error.message}`;
    return;
  }
  control.update(state.workspaces);
  $("connection").textContent = state.connected ? "Connected to the local runtime." : "Not connected to the local runtime.";
  const page = state.tab?.page;
  $("scope").textContent = page ? page.scope : "No ChatGPT conversation, Project or home page in this window.";
  const binding = state.tab?.binding;
  $("binding").textContent = binding
    ? `Bound to ${binding.label || binding.workspace_id} (${binding.workspace_id})${binding.active_conv_key ? `, active conversation ${binding.active_conv_key}` : ""}.`
    : page ? "Not bound." : "";
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
  $("workspaces").replaceChildren(
    ...state.workspaces.map((workspace) => {
      const item = document.createElement("li");
      const agents = workspace.agents.map((agent) => `${agent.agent} ${agent.status}`).join(", ");
      item.innerHTML = "";
      const name = document.createElement("span");
      name.textContent = `${workspace.label}: `;
      const status = document.createElement("span");
      status.className = workspace.working ? "working" : "idle";
      status.textContent = workspace.working ? "working" : "not working";
      item.append(name, status, document.createTextNode(agents ? ` (${agents})` : ""));
      return item;
    }),
  );
}

async function bind(workspaceId) {
  try {
    const { binding } = await ask({ type: "panel.bind", workspaceId });
    $("message").textContent = binding ? `Bound to ${binding.label || binding.workspace_id}.` : "Unbound.";
  } catch (error) {
    $("message").textContent = `Error: ${error.message}`;
  }
  await refresh();
}

$("bind").addEventListener("click", () => bind($("workspace").value));
$("unbind").addEventListener("click", () => bind(null));
control.start().then(refresh);
setInterval(refresh, REFRESH_MS);
