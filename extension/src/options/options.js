import { DEFAULT_OPTIONS, normalizeOptions } from "../lib/progress.js";

const form = document.getElementById("options");
const fields = Object.keys(DEFAULT_OPTIONS);

chrome.storage.local.get("options").then(({ options }) => {
  const values = normalizeOptions(options ?? {});
  for (const name of fields) {
    document.getElementById(name).value = values[name];
  }
});

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const raw = Object.fromEntries(fields.map((name) => [name, document.getElementById(name).value]));
  const options = normalizeOptions(raw);
  await chrome.storage.local.set({ options });
  document.getElementById("saved").textContent = `Saved: tick ${options.progressTickSec} s, fallback ${options.progressFallbackSec} s.`;
});
