// The Control Center in the side panel: the live workspaces, their panes and agents (the runtime's
// /push/state for workspaces, its pane.list for panes; re-read on every push event the service
// worker forwards, and on the panel's own tick), one pinned target kept in chrome.storage.local,
// bounded reads of the pinned pane's output, and sending to it: a prompt to an agent
// (agent.prompt) or one line and Enter into a terminal pane (pane.send_input). Nothing else of
// Herdr is offered. Every send carries the target it was pinned as (the runtime refuses
// `target_changed` when the pane no longer holds it) and an idempotency key; the send is kept in
// storage until its answer arrives, so an unconfirmed send is retried with the same key and
// delivered at most once.

import { keepsPending, knownCode, newKey, pinDrift, pinFromPane, readLines, sendRequest } from "../lib/control.js";
import { t } from "../lib/i18n.js";
import { CONTROL_LAST, CONTROL_PENDING, CONTROL_PINNED } from "../lib/storage-keys.js";

const $ = (id) => document.getElementById(id);

class RequestError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

async function request(method, body) {
  const answer = await chrome.runtime.sendMessage({ type: "control.request", method, body });
  if (answer?.error) {
    throw new RequestError(knownCode(answer.error.code ?? "failed"), answer.error.message ?? "failed");
  }
  return answer;
}

async function stored(key) {
  return (await chrome.storage.local.get(key))[key] ?? null;
}

function element(tag, { className = null, text = null } = {}, ...children) {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== null) {
    node.textContent = text;
  }
  node.append(...children);
  return node;
}

function describe(target) {
  if (target.agent) {
    return target.agent_kind ? t("ccDescribeAgentKind", target.agent, target.agent_kind) : t("ccDescribeAgent", target.agent);
  }
  return t("ccDescribeTerminal", target.label || target.pane_id);
}

const STATUS_NAMES = { working: "statusWorking", idle: "statusIdle", done: "statusDone", blocked: "statusBlocked" };

/** Herdr's agent status in words (an unknown one as it came). */
function statusName(status) {
  if (!status) {
    return t("statusUnknown");
  }
  return STATUS_NAMES[status] ? t(STATUS_NAMES[status]) : status;
}

export class ControlPanel {
  constructor() {
    this.workspaces = [];
    this.panes = [];
    this.pin = null;
    this.following = false;
    this.refreshing = null;
    $("cc-read").addEventListener("click", () => this.read());
    $("cc-unpin").addEventListener("click", () => this.setPin(null));
    $("cc-send").addEventListener("click", () => this.send());
    $("cc-retry").addEventListener("click", () => this.retry());
    $("cc-forget").addEventListener("click", () => this.forget());
    chrome.runtime.onMessage.addListener((message) => {
      if (message?.type === "control.changed") {
        this.refresh().then(() => {
          if (this.following && this.pin && message.pane_id === this.pin.pane_id) {
            this.read();
          }
        });
      }
    });
  }

  async start() {
    this.pin = await stored(CONTROL_PINNED);
    await this.showPending();
    this.renderPin();
  }

  /** New workspaces from the panel's /push/state read; re-reads the panes. */
  async update(workspaces) {
    this.workspaces = workspaces;
    await this.refresh();
  }

  async refresh() {
    if (this.refreshing) {
      return this.refreshing;
    }
    this.refreshing = (async () => {
      try {
        this.panes = (await request("pane.list", {})).panes;
        $("cc-status").textContent = "";
      } catch (error) {
        $("cc-status").textContent = t("ccPanesUnavailable", error.message);
      }
      this.renderTree();
      this.renderPin();
    })();
    try {
      await this.refreshing;
    } finally {
      this.refreshing = null;
    }
  }

  renderTree() {
    const labels = new Map(this.workspaces.map((workspace) => [workspace.workspace_id, workspace]));
    const ids = [...new Set([...this.workspaces.map((w) => w.workspace_id), ...this.panes.map((p) => p.workspace_id)])];
    $("cc-tree").replaceChildren(
      ...ids.map((workspaceId) => {
        const workspace = labels.get(workspaceId);
        const panes = this.panes.filter((pane) => pane.workspace_id === workspaceId);
        const working = workspace ? workspace.working : panes.some((pane) => pane.status === "working");
        const head = element(
          "div",
          { className: "cc-ws-head" },
          element("strong", { text: workspace?.label || workspaceId }),
          element("span", { className: `badge ${working ? "working" : "idle"}`, text: working ? t("statusWorking") : t("statusNotWorking") }),
          element("span", { className: "mono muted", text: workspaceId }),
        );
        const list = element(
          "ul",
          { className: "cc-panes" },
          ...panes.map((pane) => this.paneRow(pane, workspace?.label ?? null)),
        );
        return element("div", { className: "cc-ws" }, head, list);
      }),
    );
  }

  paneRow(pane, workspaceLabel) {
    const pinned = this.pin?.pane_id === pane.pane_id;
    const button = element("button", { className: "cc-pin", text: pinned ? t("ccPinned") : t("ccPin") });
    button.dataset.pane = pane.pane_id;
    button.disabled = pinned;
    button.addEventListener("click", () => this.setPin(pinFromPane(pane, workspaceLabel)));
    const what = pane.agent
      ? element("span", { className: "cc-name", text: `${pane.agent}` }, element("span", { className: "muted", text: ` ${pane.agent_kind ?? t("ccAgent")}` }))
      : element("span", { className: "cc-name", text: pane.label || t("ccTerminal") }, element("span", { className: "muted", text: ` ${t("ccTerminal")}` }));
    const status = pane.agent ? element("span", { className: `badge ${pane.status ?? "unknown"}`, text: statusName(pane.status) }) : element("span");
    const row = element("li", { className: pinned ? "cc-pane pinned" : "cc-pane" }, what, status, element("span", { className: "mono muted", text: pane.pane_id }), button);
    row.dataset.pane = pane.pane_id;
    return row;
  }

  async setPin(pin) {
    this.pin = pin;
    this.following = false;
    $("cc-output").textContent = "";
    if (pin) {
      await chrome.storage.local.set({ [CONTROL_PINNED]: pin });
      $("cc-message").textContent = t("ccPinnedMessage", describe(pin));
    } else {
      await chrome.storage.local.remove(CONTROL_PINNED);
      $("cc-message").textContent = t("ccUnpinnedMessage");
    }
    this.renderTree();
    this.renderPin();
  }

  renderPin() {
    const pin = this.pin;
    $("cc-pinned").hidden = !pin;
    $("cc-none").hidden = Boolean(pin);
    if (!pin) {
      return;
    }
    const live = this.panes.find((pane) => pane.pane_id === pin.pane_id);
    const where = pin.workspace_label ? `${pin.workspace_label} (${pin.workspace_id})` : pin.workspace_id;
    const line = t("ccPinLine", describe(pin), where, pin.pane_id);
    $("cc-pin-line").textContent = live?.status ? `${line} · ${statusName(live.status)}` : line;
    const drift = this.panes.length ? pinDrift(pin, this.panes) : null;
    $("cc-drift").textContent = drift ? t("ccDrift", drift) : "";
    $("cc-drift").hidden = !drift;
    $("cc-text-label").textContent = pin.agent ? t("ccPromptFor", pin.agent) : t("ccLineForTerminal");
    $("cc-send").textContent = pin.agent ? t("ccSendPrompt") : t("ccTypeEnter");
  }

  async read() {
    if (!this.pin) {
      return;
    }
    const lines = readLines($("cc-lines").value);
    $("cc-lines").value = String(lines);
    try {
      const answer = await request("pane.read", { pane_id: this.pin.pane_id, lines });
      this.following = true;
      $("cc-output").textContent = answer.text || t("ccNoOutput");
      $("cc-output").scrollTop = $("cc-output").scrollHeight;
      const notes = [t("ccLastLines", lines)];
      if (answer.capped) {
        notes.push(t("ccCut", answer.max_chars));
      }
      $("cc-read-note").textContent = notes.join("; ");
    } catch (error) {
      $("cc-read-note").textContent = t("ccReadFailed", error.code, error.message);
    }
  }

  async send() {
    if (!this.pin) {
      return;
    }
    let pending;
    try {
      pending = { ...sendRequest(this.pin, $("cc-text").value, newKey()), at: Date.now() };
    } catch (error) {
      $("cc-message").textContent = error.message;
      return;
    }
    await chrome.storage.local.set({ [CONTROL_PENDING]: pending });
    await this.deliver(pending);
  }

  async retry() {
    const pending = await stored(CONTROL_PENDING);
    if (pending) {
      await this.deliver(pending);
    }
  }

  async forget() {
    await chrome.storage.local.remove(CONTROL_PENDING);
    await this.showPending();
    $("cc-message").textContent = t("ccForgot");
  }

  async deliver(pending) {
    $("cc-send").disabled = true;
    $("cc-retry").disabled = true;
    const what = pending.method === "agent.prompt" ? t("ccPromptTo", pending.body.agent) : t("ccInputTo", pending.body.pane_id);
    try {
      const answer = await request(pending.method, pending.body);
      await chrome.storage.local.set({ [CONTROL_LAST]: { ...pending, answered: Date.now() } });
      await chrome.storage.local.remove(CONTROL_PENDING);
      const key = pending.body.idempotency_key;
      if (answer.idempotent_replay) {
        $("cc-message").textContent = t("ccAlreadyDelivered", what, key);
      } else {
        $("cc-message").textContent = t("ccDelivered", what, key);
        $("cc-text").value = "";
      }
    } catch (error) {
      if (keepsPending(error.code)) {
        $("cc-message").textContent = t("ccNotConfirmed", what, error.code, error.message);
      } else {
        await chrome.storage.local.remove(CONTROL_PENDING);
        $("cc-message").textContent = t("ccRefused", what, error.code, error.message);
      }
    } finally {
      $("cc-send").disabled = false;
      $("cc-retry").disabled = false;
      await this.showPending();
    }
  }

  async showPending() {
    const pending = await stored(CONTROL_PENDING);
    $("cc-pending").hidden = !pending;
    if (pending) {
      const target = pending.method === "agent.prompt" ? t("ccTargetAgent", pending.body.agent) : t("ccTargetPane", pending.body.pane_id);
      $("cc-pending-line").textContent = t("ccPendingLine", target, [...pending.body.text].slice(0, 80).join(""), pending.body.idempotency_key);
    }
  }
}
