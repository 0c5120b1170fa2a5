import { DEFAULT_OPTIONS, normalizeOptions } from "../lib/progress.js";
import { rolloverOptions } from "../lib/rollover.js";
import { healthOptions } from "../lib/page-health.js";
import { localize, t } from "../lib/i18n.js";
import * as keys from "../lib/storage-keys.js";
import { cutCodePoints } from "../lib/text.js";

const HEALTH_FIELDS = ["staleAfterSec", "stalledAfterSec", "stalledWaitSec"];

localize(document);
document.title = t("optionsTitle");
const form = document.getElementById("options");
const fields = Object.keys(DEFAULT_OPTIONS);

chrome.storage.local.get(keys.OPTIONS).then((found) => {
  const options = found[keys.OPTIONS];
  const values = normalizeOptions(options ?? {});
  for (const name of fields) {
    document.getElementById(name).value = values[name];
  }
  const rollover = rolloverOptions(options ?? {});
  document.getElementById("rolloverAuto").checked = rollover.rolloverAuto;
  document.getElementById("rolloverContextTokens").value = rollover.rolloverContextTokens;
  document.getElementById("rolloverThreshold").value = rollover.rolloverThreshold;
  const health = healthOptions(options ?? {});
  for (const name of HEALTH_FIELDS) {
    document.getElementById(name).value = health[name];
  }
  document.getElementById("connectorName").value = typeof options?.connectorName === "string" ? options.connectorName : "";
});

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const raw = Object.fromEntries(fields.map((name) => [name, document.getElementById(name).value]));
  const stored = (await chrome.storage.local.get(keys.OPTIONS))[keys.OPTIONS];
  const rollover = rolloverOptions({
    rolloverAuto: document.getElementById("rolloverAuto").checked,
    rolloverContextTokens: Number(document.getElementById("rolloverContextTokens").value),
    rolloverThreshold: Number(document.getElementById("rolloverThreshold").value),
    rolloverReserveTokens: stored?.rolloverReserveTokens,
  });
  // Other settings kept in `options` (handoff deadlines, say) stay as they are.
  const health = healthOptions({ ...stored, ...Object.fromEntries(HEALTH_FIELDS.map((name) => [name, document.getElementById(name).value])) });
  // The connector's name as ChatGPT shows it on tool cards; empty: the default (background/worker.js).
  const connectorName = cutCodePoints(document.getElementById("connectorName").value.trim(), 100);
  const options = { ...stored, ...normalizeOptions(raw), ...rollover, ...health, connectorName };
  await chrome.storage.local.set({ [keys.OPTIONS]: options });
  document.getElementById("saved").textContent = t("optSaved");
});
