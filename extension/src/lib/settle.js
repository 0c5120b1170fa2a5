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
  return { wokenTurn: null, wokenSeq: null, pending: null };
}

/**
 * A turn ended for the scope's workspace (or task outcomes wait in its inbox), known at log
 * position `seq`: a pending wake, unless
 * - this turn already woke the scope, or
 * - the last wake sent was created at a later log position (`wokenSeq`): it asked to re-inspect
 *   the live state after this settle had happened (say a settle replayed after a restart that a
 *   wake for the same work, made from the inbox, already covered), or
 * - a wake is already pending: one wake per scope at a time; it then covers this turn too.
 */
export function wakeFor(wake, turn, now, seq = null) {
  if (turn === null || wake.wokenTurn === turn) {
    return { wake, created: false };
  }
  if (seq !== null && wake.wokenSeq !== null && wake.wokenSeq !== undefined && seq <= wake.wokenSeq) {
    return { wake, created: false };
  }
  if (wake.pending) {
    if (seq !== null && wake.pending.seq !== null && wake.pending.seq !== undefined && seq <= wake.pending.seq) {
      return { wake, created: false }; // the pending wake covers it as it is
    }
    const newest = Math.max(wake.pending.seq ?? -1, seq ?? -1);
    const pending = { turn, at: wake.pending.at, seq: newest < 0 ? null : newest };
    return { wake: { ...wake, pending }, created: false };
  }
  return { wake: { ...initialWake(), ...wake, pending: { turn, at: now, seq } }, created: true };
}

/** The wake `sent` (the pending wake as it was when sending began) was confirmed sent. */
export function woke(wake, sent) {
  const pending = wake.pending;
  const known = (value) => value !== null && value !== undefined;
  const covered = pending && known(sent.seq) && known(pending.seq) && pending.seq <= sent.seq;
  const newer = pending && pending.turn !== sent.turn && !covered ? pending : null;
  return { wokenTurn: sent.turn, wokenSeq: sent.seq ?? null, pending: newer };
}
