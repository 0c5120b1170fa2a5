// Bindings of web scopes to Herdr workspaces, kept by the runtime (`/browser/binding.*`); this
// is the worker's cache of them, the live workspace list from `/push/state`, label refresh, and
// the one-time migration of a root page's pending binding.

import { isScope } from "../lib/scope.js";

// The runtime keeps a Project's active conversation as the site's path (`/c/<id>`,
// docs/browser-protocol.md 2); the worker uses the bare conversation id.
const toRuntime = (convKey) => `/c/${convKey}`;
function fromRuntime(binding) {
  const key = binding?.active_conv_key;
  return typeof key === "string" && key.startsWith("/c/") ? { ...binding, active_conv_key: key.slice(3) } : binding;
}

export class Bindings {
  constructor(native, log = console) {
    this.native = native;
    this.log = log;
    this.byScope = new Map();
    this.workspaces = new Map();
    this.stateSeq = null;
  }

  async refresh() {
    const { bindings } = await this.native.call("/browser/binding.list", {});
    this.byScope = new Map(bindings.map((binding) => [binding.scope, fromRuntime(binding)]));
    return this.byScope;
  }

  /** The live workspace list; bindings whose label changed are updated (workspace_id is the identity). */
  async refreshState() {
    const state = await this.native.request("GET", "/push/state");
    this.stateSeq = state.seq;
    this.workspaces = new Map(state.workspaces.map((workspace) => [workspace.workspace_id, workspace]));
    for (const binding of [...this.byScope.values()]) {
      const live = this.workspaces.get(binding.workspace_id);
      if (live && live.label && live.label !== binding.label) {
        try {
          await this.set(binding.scope, binding.workspace_id, { label: live.label, active_conv_key: binding.active_conv_key });
        } catch (error) {
          this.log.warn("herdr-mcp: refreshing a label failed", binding.scope, error.message);
        }
      }
    }
    return state;
  }

  /**
   * A push event moves one agent of the live list: `agent_working` -> working, `agent_settled` ->
   * its status, `agent_gone` -> gone. So the list a wake names is the one as of the events handled
   * so far (the settle that ends the turn included), with no read of /push/state in its way.
   * A workspace not in the list waits for the next refreshState.
   */
  follow(type, event) {
    const live = this.workspaces.get(event?.workspace_id);
    if (!live || typeof event.pane_id !== "string") {
      return;
    }
    const agents = [...(live.agents ?? [])];
    const index = agents.findIndex((agent) => agent.pane_id === event.pane_id);
    if (type === "agent_gone") {
      if (index >= 0) {
        agents.splice(index, 1);
      }
    } else {
      const status = type === "agent_working" ? "working" : event.status;
      const agent = { pane_id: event.pane_id, agent: event.agent ?? agents[index]?.agent ?? event.pane_id, status };
      if (index >= 0) {
        agents[index] = agent;
      } else {
        agents.push(agent);
      }
    }
    const working = type === "agent_working" || Boolean(event.workspace_working);
    this.workspaces.set(live.workspace_id, { ...live, working, agents });
  }

  get(scope) {
    return this.byScope.get(scope) ?? null;
  }

  scopesOf(workspaceId) {
    return [...this.byScope.values()].filter((binding) => binding.workspace_id === workspaceId);
  }

  label(workspaceId) {
    return this.workspaces.get(workspaceId)?.label ?? null;
  }

  async set(scope, workspaceId, { label, active_conv_key: activeConvKey } = {}) {
    if (!isScope(scope)) {
      throw new Error(`not a scope: ${scope}`);
    }
    const body = { scope, workspace_id: workspaceId };
    if (workspaceId !== null) {
      const shown = label ?? this.label(workspaceId);
      if (shown) {
        body.label = shown;
      }
      if (activeConvKey) {
        body.active_conv_key = toRuntime(activeConvKey);
      }
    }
    const binding = fromRuntime((await this.native.call("/browser/binding.set", body)).binding);
    if (binding) {
      this.byScope.set(scope, binding);
    } else {
      this.byScope.delete(scope);
    }
    return binding;
  }

  /**
   * A tab that was on the root page (`rootScope`) landed on `page`: its pending binding moves to
   * the page's scope once (set there, then deleted from the root scope). A scope that is already
   * bound keeps its binding; the pending one is dropped. Returns the new binding or null.
   */
  async migrateRoot(rootScope, page) {
    const pending = this.get(rootScope);
    if (!pending || !page || page.kind === "root") {
      return null;
    }
    let moved = null;
    if (!this.get(page.scope)) {
      moved = await this.set(page.scope, pending.workspace_id, {
        label: pending.label,
        active_conv_key: page.kind === "project" ? page.convKey : null,
      });
    }
    await this.set(rootScope, null);
    return moved;
  }
}
