// Settled -> one wake per turn. Pure state transitions over the push events of one workspace and
// the wake record of one scope; the worker persists both.
//
// A *turn* of a workspace starts when it goes from not working to working (its `agent_working`
// event's seq names the turn) and ends with the `agent_settled` whose `workspace_working` is
// false. That settle wakes each scope bound to the workspace once: a second settle with no
// working in between belongs to the same turn and wakes nobody; a settle of a pane while other
// panes still work is partial progress, not a wake.

export function initialWorkspace() {
  return { working: false, turn: null };
}

export function onWorking(workspace, seq) {
  if (workspace.working) {
    return workspace;
  }
  return { working: true, turn: `w${seq}` };
}

/**
 * An `agent_settled` event. Returns `{workspace, settledTurn}`: `settledTurn` is the turn that
 * just ended (the caller wakes its scopes once for it), or null.
 */
export function onSettled(workspace, event) {
  if (event.workspace_working) {
    // Another agent still works; a settle of one pane started a turn if none was known.
    return { workspace: onWorking(workspace, event.seq), settledTurn: null };
  }
  if (!workspace.working) {
    return { workspace, settledTurn: null };
  }
  return { workspace: { working: false, turn: workspace.turn }, settledTurn: workspace.turn };
}

/**
 * What `/push/state` says now, for a workspace the worker has no record of, or after a replay gap
 * (events pruned): a workspace we thought working that is no longer working ended its turn.
 */
export function reconcile(workspace, working, seq) {
  if (working && !workspace.working) {
    return { workspace: { working: true, turn: `s${seq}` }, settledTurn: null };
  }
  if (!working && workspace.working) {
    return { workspace: { working: false, turn: workspace.turn }, settledTurn: workspace.turn };
  }
  return { workspace, settledTurn: null };
}

export function initialWake() {
  return { wokenTurn: null, pending: null };
}

/** A turn ended for the scope's workspace: a pending wake, unless this turn already woke it. */
export function wakeFor(wake, turn, now) {
  if (turn === null || wake.wokenTurn === turn || (wake.pending && wake.pending.turn === turn)) {
    return { wake, created: false };
  }
  return { wake: { wokenTurn: wake.wokenTurn, pending: { turn, at: now } }, created: true };
}

/** The wake of `turn` was confirmed sent: it is woken, nothing pending. */
export function woke(wake, turn) {
  return { wokenTurn: turn, pending: wake.pending && wake.pending.turn !== turn ? wake.pending : null };
}
