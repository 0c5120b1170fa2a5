import { DEFAULT_OPTIONS, normalizeOptions } from "../lib/progress.js";
import { rolloverOptions } from "../lib/rollover.js";

const form = document.getElementById("options");
const fields = Object.keys(DEFAULT_OPTIONS);

chrome.storage.local.get("options").then(({ options }) => {
  const values = normalizeOptions(options ?? {});
  for (const name of fields) {
    document.getElementById(name).value = values[name];
  }
  const rollover = rolloverOptions(options ?? {});
  document.getElementById("rolloverAuto").checked = rollover.rolloverAuto;
  document.getElementById("rolloverContextTokens").value = rollover.rolloverContextTokens;
  document.getElementById("rolloverThreshold").value = rollover.rolloverThreshold;
});

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const raw = Object.fromEntries(fields.map((name) => [name, document.getElementById(name).value]));
  const { options: stored } = await chrome.storage.local.get("options");
  const rollover = rolloverOptions({
    rolloverAuto: document.getElementById("rolloverAuto").checked,
    rolloverContextTokens: Number(document.getElementById("rolloverContextTokens").value),
    rolloverThreshold: Number(document.getElementById("rolloverThreshold").value),
    rolloverReserveTokens: stored?.rolloverReserveTokens,
  });
  // Other settings kept in `options` (handoff deadlines, say) stay as they are.
  const options = { ...stored, ...normalizeOptions(raw), ...rollover };
  await chrome.storage.local.set({ options });
  document.getElementById("saved").textContent = `Saved: tick ${options.progressTickSec} s, fallback ${options.progressFallbackSec} s.`;
});
