// The texts the extension types into a conversation. A wake asks the planner to re-inspect the
// live state; it never says the work is done (a settle proves a state change, not success).
//
// Language (extension/README.md, "Language"): the sentences are in the person's language
// (lib/i18n.js: they appear as the person's own turn, and a model answers in the language it is
// written to); what a program or the model's protocol reads stays as it is in every language:
// the `[herdr-mcp]` mark, workspace ids and labels, agent names and Herdr's statuses, task ids and
// outcomes, and the bridge's call form (BRIDGE_HINT, in the protocol prompt's language).

import { CALL_FORM_HINT } from "./bridge-protocol.js";
import { t } from "./i18n.js";

export const MARK = "[herdr-mcp]";
/** The bridge's sites reach the tools only through calls in fenced json code blocks
 * (content/bridge-main.js); the reminder is the protocol's own words (lib/bridge-protocol.js). */
const BRIDGE_HINT = CALL_FORM_HINT;

function agentList(agents) {
  return agents.map((agent) => `${agent.agent ?? agent.pane_id} ${agent.status}`).join(", ");
}

/** A workspace as a wake or a check names it: `"label" (id)`, or the id alone. */
function quoted(label, workspaceId) {
  return label ? `"${label}" (${workspaceId})` : workspaceId;
}

/** What ends a wake and a check alike: the task outcomes, the ask to re-inspect, the call form. */
function closing(lines, inbox, bridged) {
  for (const item of inbox) {
    lines.push(t("wakeTask", item.task_id, item.outcome));
  }
  lines.push(t("wakeReinspect"));
  if (bridged) {
    lines.push(BRIDGE_HINT);
  }
  return lines.join("\n");
}

/**
 * `bridged`: a z.ai or DeepSeek conversation, whose model reaches the tools only through the
 * bridge's fenced json calls (the protocol prompt earlier in the conversation), so the wake says so.
 */
export function wakeText({ label, workspaceId, agents = [], inbox = [], bridged = false }) {
  const lines = [`${MARK} ${t("wakeSettled", quoted(label, workspaceId))}`];
  if (agents.length > 0) {
    lines.push(t("wakeAgents", agentList(agents)));
  }
  return closing(lines, inbox, bridged);
}

export function progressText({ label, workspaceId, summary }) {
  const name = label || workspaceId;
  return `${MARK} ${t("progressIn", name)}\n${summary}`;
}

export function fallbackText({ label, workspaceId, quietSec }) {
  const name = label || workspaceId;
  return `${MARK} ${t("progressQuiet", name, quietSec)}`;
}

/**
 * The HUD's Continue. Bound (a workspace named): re-inspect that workspace and go on; on a page
 * bound to nothing there is no workspace to name, so it only asks the conversation to go on.
 */
export function continueText({ label, workspaceId, bridged = false } = {}) {
  const name = label || workspaceId;
  const text = name ? `${MARK} ${t("continueBound", name)}` : `${MARK} ${t("continueUnbound")}`;
  return bridged ? `${text}\n${BRIDGE_HINT}` : text;
}

/**
 * The HUD's "Check Herdr": the bound workspace's live state as the runtime reads it now
 * (`/push/state`'s entry: `working`, `agents`), with the scope's unacknowledged task outcomes
 * (`inbox`, left unacknowledged: only a wake acknowledges them), and the same ask as a wake:
 * look before deciding; a state is not a result.
 */
export function checkText({ label, workspaceId, workspace = null, inbox = [], bridged = false }) {
  const lines = [`${MARK} ${t("checkHeader", quoted(label, workspaceId))}`];
  if (!workspace) {
    lines.push(t("checkGone"));
  } else {
    lines.push(workspace.working ? t("checkWorking") : t("checkNotWorking"));
    lines.push(workspace.agents?.length ? t("wakeAgents", agentList(workspace.agents)) : t("checkNoAgents"));
  }
  return closing(lines, inbox, bridged);
}
