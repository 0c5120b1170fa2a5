// The HUD injected into the page (in a shadow root, so the site's styles do
// not reach it): the scope's state line, a manual Continue, the scope's Auto toggle and the
// queue button with its count (right click clears the queue), and the handoff entry. The same
// HUD serves ChatGPT (content/main.js, element <herdr-mcp-hud>) and the bridge's z.ai and
// DeepSeek pages (content/bridge-main.js, element <herdr-bridge-hud>), which add a row of their
// own: the bridge's last action and its "Start Herdr tools" button.

const STYLE = `
  :host { all: initial; }
  .hud { position: fixed; right: 16px; bottom: 96px; z-index: 2147483647; width: 300px;
    font: 13px/1.4 system-ui, sans-serif; color: #f5f5f5; background: #1f2430; border: 1px solid #3b4252;
    border-radius: 10px; padding: 10px 12px; box-shadow: 0 4px 16px rgba(0,0,0,.35); }
  .title { font-weight: 600; margin-bottom: 4px; display: flex; justify-content: space-between; }
  .dot { display: inline-block; width: 8px; height: 8px; border-radius: 50%; margin-right: 6px; background: #bf616a; }
  .dot.on { background: #a3be8c; }
  .line { color: #d8dee9; margin: 4px 0 8px; white-space: pre-wrap; word-break: break-word; }
  .row { display: flex; gap: 6px; }
  button { font: inherit; color: #eceff4; background: #3b4252; border: 1px solid #4c566a; border-radius: 6px;
    padding: 4px 8px; cursor: pointer; }
  button:disabled { opacity: .45; cursor: default; }
  button.active { background: #5e81ac; border-color: #81a1c1; }
  .handoff-row { margin-top: 6px; }
  .health { color: #ebcb8b; margin: 0 0 6px; white-space: pre-wrap; word-break: break-word; }
  .health:empty { display: none; }
  .copy { display: none; width: 100%; box-sizing: border-box; height: 90px; margin-top: 6px; font: 11px/1.3 ui-monospace, monospace;
    color: #eceff4; background: #2e3440; border: 1px solid #4c566a; border-radius: 6px; }
  .copy.shown { display: block; }
  .bridge { margin-top: 6px; padding-top: 6px; border-top: 1px solid #3b4252; display: flex; gap: 6px; align-items: center; }
  .bridge-line { flex: 1; color: #d8dee9; font-size: 12px; word-break: break-word; }
`;

export class Hud {
  /** `bridge`: `{onStart}` on the bridge's sites, for their row; `tag`: the HUD's element name. */
  constructor({ onContinue, onAuto, onQueue, onClearQueue, onHandoff, bridge = null, tag = "herdr-mcp-hud" }) {
    this.host = document.createElement(tag);
    const root = this.host.attachShadow({ mode: "open" });
    root.innerHTML = `<style>${STYLE}</style>
      <div class="hud" part="hud">
        <div class="title"><span><span class="dot"></span>herdr-mcp</span><span class="scope"></span></div>
        <div class="line status">starting…</div>
        <div class="health"></div>
        <div class="row">
          <button class="continue" title="Send the pending wake, or ask the planner to continue">Continue</button>
          <button class="auto" title="Automatic wakes and progress for this scope">Auto: off</button>
          <button class="queue" title="Queue the composer's text as the next message (right click: clear the queue)">Queue (0)</button>
        </div>
        <div class="row handoff-row">
          <button class="handoff" title="Hand this conversation off to a new conversation in the same scope">Hand off</button>
        </div>
        <textarea class="copy" readonly title="The handoff prompt: paste it into a new conversation"></textarea>
        ${bridge ? `<div class="bridge"><span class="bridge-line"></span><button class="start" title="Send the protocol prompt built from the local tools">Start Herdr tools</button></div>` : ""}
      </div>`;
    this.root = root;
    this.parts = {
      dot: root.querySelector(".dot"),
      scope: root.querySelector(".scope"),
      line: root.querySelector(".line"),
      continue: root.querySelector(".continue"),
      auto: root.querySelector(".auto"),
      queue: root.querySelector(".queue"),
      handoff: root.querySelector(".handoff"),
      copy: root.querySelector(".copy"),
      health: root.querySelector(".health"),
      bridge: root.querySelector(".bridge-line"),
    };
    root.querySelector(".start")?.addEventListener("click", () => bridge.onStart());
    this.state = null;
    this.parts.continue.addEventListener("click", () => onContinue());
    this.parts.auto.addEventListener("click", () => onAuto(!this.state?.auto));
    this.parts.queue.addEventListener("click", () => onQueue());
    this.parts.handoff.addEventListener("click", () => this.handoffClicked(onHandoff));
    this.parts.handoff.addEventListener("contextmenu", (event) => {
      // With the copy prompt shown, a right click tries the automatic handoff again.
      if (this.state?.handoff?.copyPrompt) {
        event.preventDefault();
        onHandoff("start");
      }
    });
    this.parts.queue.addEventListener("contextmenu", (event) => {
      event.preventDefault();
      onClearQueue();
    });
    document.documentElement.appendChild(this.host);
  }

  /** Render the worker's state for this tab (Continuation.hudState). */
  render(state, message = null) {
    this.state = state;
    const { parts } = this;
    const page = state?.page;
    parts.dot.classList.toggle("on", Boolean(state?.connected));
    parts.scope.textContent = page ? page.kind : "";
    parts.auto.textContent = `Auto: ${state?.auto ? "on" : "off"}`;
    parts.auto.classList.toggle("active", Boolean(state?.auto));
    parts.auto.disabled = !page;
    parts.queue.textContent = `Queue (${state?.queue?.length ?? 0})`;
    parts.queue.disabled = !page?.convKey;
    // Auto on locks the manual push, so two paths never drive one conversation.
    parts.continue.disabled = !page?.convKey || Boolean(state?.auto);
    this.renderHandoff(state);
    parts.line.textContent = message ?? describe(state);
  }

  /** One entry, whose label follows the transfer: Hand off, Handing off…, Resume handoff, Copy prompt. */
  renderHandoff(state) {
    const { handoff: button, copy } = this.parts;
    const view = state?.handoff;
    let label = "Hand off";
    if (view?.inFlight) {
      label = "Handing off…";
    } else if (view?.resumable) {
      label = "Resume handoff";
    } else if (view?.copyPrompt) {
      label = "Copy prompt";
    }
    button.textContent = label;
    button.title = view?.copyPrompt
      ? "Copy the handoff prompt (right click: try the automatic handoff again)"
      : "Hand this conversation off to a new conversation in the same scope";
    button.disabled = !state?.page?.convKey || !state?.connected || Boolean(view?.inFlight);
    const prompt = view?.copyPrompt ?? "";
    if (copy.value !== prompt) {
      copy.value = prompt;
    }
    copy.classList.toggle("shown", Boolean(prompt));
  }

  handoffClicked(onHandoff) {
    const view = this.state?.handoff;
    if (view?.copyPrompt) {
      this.parts.copy.select();
      navigator.clipboard?.writeText(view.copyPrompt).then(
        () => this.flash("Prompt copied: paste it into a new conversation."),
        () => this.flash("Copy the selected prompt (Ctrl+C) into a new conversation."),
      );
      return;
    }
    onHandoff(view?.resumable ? "resume" : "start");
  }

  /** Page health (content/page-health.js): its own line, kept across the worker's renders. */
  setHealth(text) {
    this.parts.health.textContent = text;
  }

  /** The bridge's own line (bridge sites only). */
  setBridge(text) {
    if (this.parts.bridge) {
      this.parts.bridge.textContent = text;
    }
  }

  flash(message) {
    this.render(this.state, message);
  }
}

function describe(state) {
  if (!state?.page) {
    return "Not a conversation or Project page.";
  }
  const lines = [];
  if (!state.connected) {
    lines.push("Not connected to herdr-mcp (is the runtime running and the native host installed?).");
  } else if (!state.binding) {
    lines.push("Not bound: bind this page to a workspace in the side panel.");
  } else {
    const name = state.binding.label || state.binding.workspace_id;
    lines.push(`Bound to ${name}: ${state.working ? "working" : "not working"}.`);
    if (state.wakePending) {
      lines.push(state.auto ? "Settled: waking the conversation." : "Settled: press Continue to wake the conversation.");
    }
    if (!state.isTarget && state.page.kind === "project") {
      lines.push("Wakes go to the Project's active conversation.");
    }
  }
  if (state.pausedMs > 0) {
    lines.push(`ChatGPT answered 429: sending paused for ${Math.ceil(state.pausedMs / 1000)} s.`);
  }
  if (state.uncertain) {
    lines.push("A send was not confirmed: automation paused; press Continue after checking the page.");
  }
  const pressure = state.handoff?.pressure;
  if (pressure?.on) {
    lines.push(`Context ~${Math.round(pressure.ratio * 100)}% (auto rollover on).`);
  }
  if (state.handoff?.phase === "seed_uncertain") {
    lines.push("Handoff seed_uncertain: this conversation stays active until the seed is confirmed.");
  } else if (state.handoff?.phase === "unavailable") {
    lines.push("Browser control unavailable: copy the prompt into a new conversation.");
  } else if (state.handoff?.phase === "refused") {
    lines.push(`Handoff refused: ${state.handoff.error?.code}.`);
  }
  if (state.note) {
    lines.push(`Last: ${state.note.line}`);
  }
  return lines.join("\n");
}
