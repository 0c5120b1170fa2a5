// The texts the extension types into a conversation. A wake asks the planner to re-inspect the
// live state; it never says the work is done (a settle proves a state change, not success).

export const MARK = "[herdr-mcp]";
/** The bridge's sites reach the tools only through JSON lines (content/bridge-main.js). */
const BRIDGE_HINT = 'Use the Herdr tools as the protocol prompt says: one {"tool": ..., "args": {...}} JSON line per call.';

/**
 * `bridged`: a z.ai or DeepSeek conversation, whose model reaches the tools only through the
 * bridge's JSON lines (the protocol prompt earlier in the conversation), so the wake says so.
 */
export function wakeText({ label, workspaceId, agents = [], inbox = [], bridged = false }) {
  const name = label ? `"${label}" (${workspaceId})` : workspaceId;
  const lines = [
    `${MARK} No agent in workspace ${name} is working any more.`,
  ];
  if (agents.length > 0) {
    lines.push(`Agents now: ${agents.map((agent) => `${agent.agent ?? agent.pane_id} ${agent.status}`).join(", ")}.`);
  }
  for (const item of inbox) {
    lines.push(`Task ${item.task_id}: ${item.outcome}.`);
  }
  lines.push(
    "This is a signal to re-inspect, not a result: read the live Herdr state, the agents' output, " +
      "Git and the tests before deciding the next step.",
  );
  if (bridged) {
    lines.push(BRIDGE_HINT);
  }
  return lines.join("\n");
}

export function progressText({ label, workspaceId, summary }) {
  const name = label || workspaceId;
  return `${MARK} progress in ${name} (agents still working; no action needed yet):\n${summary}`;
}

export function fallbackText({ label, workspaceId, quietSec }) {
  const name = label || workspaceId;
  return `${MARK} workspace ${name} is still working; no new output in the last ${quietSec} s.`;
}

export function continueText({ label, workspaceId, bridged = false }) {
  const name = label || workspaceId || "the bound workspace";
  const text = `${MARK} Continue: re-inspect ${name}'s live state (agents, output, Git, tests) and go on with the next step.`;
  return bridged ? `${text}\n${BRIDGE_HINT}` : text;
}
