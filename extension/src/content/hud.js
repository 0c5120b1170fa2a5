// The HUD injected into the page (in a shadow root, so the site's styles do
// not reach it): the scope's state line, a manual Continue, the scope's Auto toggle and the
// queue button with its count (right click clears the queue), and the handoff entry. The same
// HUD serves ChatGPT (content/main.js, element <herdr-mcp-hud>) and the bridge's z.ai and
// DeepSeek pages (content/bridge-main.js, element <herdr-bridge-hud>), which add a row of their
// own: the bridge's last action and its "Start Herdr tools" button. Every word it shows comes
// from the extension's catalogs in the browser's language (lib/i18n.js, _locales/).
//
// Placement: the top right corner, below the sites' header, and never taller than the viewport
// less the band the sites' composers take at the bottom (COMPOSER_BAND_PX; ChatGPT's grows with
// its text), so however much the HUD shows it never covers the composer; what does not fit
// scrolls inside the HUD.

import { t } from "../lib/i18n.js";

const STYLE = `
  :host { all: initial; }
  .hud { position: fixed; right: 16px; top: 64px; z-index: 2147483647; width: 300px;
    max-height: calc(100vh - 64px - 220px); overflow-y: auto; box-sizing: border-box;
    font: 13px/1.4 system-ui, sans-serif; color: #f5f5f5; background: #1f2430; border: 1px solid #3b4252;
    border-radius: 10px; padding: 10px 12px; box-shadow: 0 4px 16px rgba(0,0,0,.35); }
  .title { font-weight: 600; margin-bottom: 4px; display: flex; justify-content: space-between; }
  .dot { display: inline-block; width: 8px; height: 8px; border-radius: 50%; margin-right: 6px; background: #bf616a; }
  .dot.on { background: #a3be8c; }
  .line { color: #d8dee9; margin: 4px 0 8px; white-space: pre-wrap; word-break: break-word; }
  .row { display: flex; gap: 6px; flex-wrap: wrap; }
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
  /**
   * `onCheck`: "Check Herdr" (the bound workspace's live state into the conversation); `bridge`:
   * `{onStart}` on the bridge's sites, for their row; `tag`: the HUD's element name.
   */
  constructor({ onContinue, onCheck, onAuto, onQueue, onClearQueue, onHandoff, bridge = null, tag = "herdr-mcp-hud" }) {
    this.host = document.createElement(tag);
    const root = this.host.attachShadow({ mode: "open" });
    root.innerHTML = `<style>${STYLE}</style>
      <div class="hud" part="hud">
        <div class="title"><span><span class="dot"></span>herdr-mcp</span><span class="scope"></span></div>
        <div class="line status"></div>
        <div class="health"></div>
        <div class="row">
          <button class="continue"></button>
          <button class="check"></button>
          <button class="auto"></button>
          <button class="queue"></button>
        </div>
        <div class="row handoff-row">
          <button class="handoff"></button>
        </div>
        <textarea class="copy" readonly></textarea>
        ${bridge ? `<div class="bridge"><span class="bridge-line"></span><button class="start"></button></div>` : ""}
      </div>`;
    this.root = root;
    this.parts = {
      dot: root.querySelector(".dot"),
      scope: root.querySelector(".scope"),
      line: root.querySelector(".line"),
      continue: root.querySelector(".continue"),
      check: root.querySelector(".check"),
      auto: root.querySelector(".auto"),
      queue: root.querySelector(".queue"),
      handoff: root.querySelector(".handoff"),
      copy: root.querySelector(".copy"),
      health: root.querySelector(".health"),
      bridge: root.querySelector(".bridge-line"),
    };
    const start = root.querySelector(".start");
    if (start) {
      start.textContent = t("hudStartTools");
      start.title = t("hudStartToolsTitle");
      start.addEventListener("click", () => bridge.onStart());
    }
    this.parts.copy.title = t("hudCopyAreaTitle");
    this.state = null;
    this.render(null, t("hudStarting"));
    this.parts.continue.addEventListener("click", () => onContinue());
    this.parts.check.addEventListener("click", () => onCheck?.());
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
    parts.scope.textContent = page ? kindName(page.kind) : "";
    parts.auto.textContent = state?.auto ? t("hudAutoOn") : t("hudAutoOff");
    parts.auto.title = t("hudAutoTitle");
    parts.auto.classList.toggle("active", Boolean(state?.auto));
    parts.auto.disabled = !page;
    parts.queue.textContent = t("hudQueue", state?.queue?.length ?? 0);
    parts.queue.title = t("hudQueueTitle");
    parts.queue.disabled = !page?.convKey;
    // Auto on locks the manual pushes (Continue, Check Herdr), so two paths never drive one
    // conversation. Check Herdr needs a bound workspace to read; Continue works unbound too.
    const locked = Boolean(state?.auto);
    parts.continue.textContent = t("hudContinue");
    parts.continue.title = locked ? t("hudLockedByAuto") : t("hudContinueTitle");
    parts.continue.disabled = !page?.convKey || locked;
    parts.check.textContent = t("hudCheck");
    parts.check.title = locked ? t("hudLockedByAuto") : state?.binding ? t("hudCheckTitle") : t("hudCheckUnbound");
    parts.check.disabled = !page?.convKey || locked || !state?.binding || !state?.connected;
    this.renderHandoff(state);
    parts.line.textContent = message ?? describe(state);
  }

  /** One entry, whose label follows the transfer: Hand off, Handing off…, Resume handoff, Copy prompt. */
  renderHandoff(state) {
    const { handoff: button, copy } = this.parts;
    const view = state?.handoff;
    let label = t("hudHandoff");
    if (view?.inFlight) {
      label = t("hudHandingOff");
    } else if (view?.resumable) {
      label = t("hudResumeHandoff");
    } else if (view?.copyPrompt) {
      label = t("hudCopyPrompt");
    }
    button.textContent = label;
    button.title = view?.copyPrompt ? t("hudCopyPromptTitle") : t("hudHandoffTitle");
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
        () => this.flash(t("hudCopied")),
        () => this.flash(t("hudCopyByHand")),
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

/** The page's kind in words (scope.js's `conv`, `project`, `root`). */
function kindName(kind) {
  return { conv: t("kindConversation"), project: t("kindProject"), root: t("kindRoot") }[kind] ?? kind;
}

function describe(state) {
  if (!state?.page) {
    return t("hudNoPage");
  }
  const lines = [];
  if (!state.connected) {
    lines.push(t("hudNotConnected"));
  } else if (!state.binding) {
    lines.push(t("hudNotBound"));
  } else {
    const name = state.binding.label || state.binding.workspace_id;
    lines.push(state.working ? t("hudBoundWorking", name) : t("hudBoundIdle", name));
    if (state.wakePending) {
      lines.push(state.auto ? t("hudWakeAuto") : t("hudWakeManual"));
    }
    if (!state.isTarget && state.page.kind === "project") {
      lines.push(t("hudProjectTarget"));
    }
  }
  if (state.pausedMs > 0) {
    lines.push(t("hudPaused", Math.ceil(state.pausedMs / 1000)));
  }
  if (state.uncertain) {
    lines.push(t("hudUncertain"));
  }
  const pressure = state.handoff?.pressure;
  if (pressure?.on) {
    lines.push(t("hudContext", Math.round(pressure.ratio * 100)));
  }
  if (state.handoff?.phase === "seed_uncertain") {
    lines.push(t("hudHandoffUnconfirmed"));
  } else if (state.handoff?.phase === "unavailable") {
    lines.push(t("hudUnavailable"));
  } else if (state.handoff?.phase === "refused") {
    const code = state.handoff.error?.code;
    lines.push(code === "workspace_working" ? t("hudRefusedWorking") : t("hudRefused", code));
  }
  if (state.note) {
    lines.push(t("hudLast", state.note.line));
  }
  return lines.join("\n");
}
