// The texts the extension types into a conversation. A wake asks the planner to re-inspect the
// live state; it never says the work is done (a settle proves a state change, not success).

export const MARK = "[herdr-mcp]";

export function wakeText({ label, workspaceId, agents = [], inbox = [] }) {
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

export function continueText({ label, workspaceId }) {
  const name = label || workspaceId || "the bound workspace";
  return `${MARK} Continue: re-inspect ${name}'s live state (agents, output, Git, tests) and go on with the next step.`;
}
