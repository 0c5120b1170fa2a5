// chrome.storage.local, the extension's only durable memory (nothing here is a secret: the bearer
// stays with the native host). Keys:
//   push:lastSeq            highest push event seq handled
//   ws:<workspace id>       the workspace's turn (lib/settle.js)
//   wake:<scope>            woken turn and pending wake of a scope (lib/settle.js)
//   progress:<scope>        last sent summary and its time (lib/progress.js)
//   auto:<scope>            true when Auto is on (absent: off)
//   queue:<conv key>        the person's queued messages (lib/queue.js)
//   backoff                 the 429 pause (lib/backoff.js)
//   journal:<conv key>      turn keys already appended (bounded)
//   options                 {progressTickSec, progressFallbackSec, handoff deadlines, rollover*}
//   log                     the last events shown in the side panel (bounded)
//   health:<conv key>       page health: the open episode, its step records, the last pressure spike
//                           (content/page-health.js; README "Page health")
//   handoff:<scope>         the scope's latest transfer and its phase (lib/handoff-state.js)
//   chain:<conv key>        the continuity_id a handoff's target conversation journals into
//   floor:<conv key>        auto rollover's message-count floor, never lower (lib/rollover.js)
//   healthRollover:<conv key>  the page-health episode (its startedAt) that started a rollover
//   prime:<conv key>        a handoff's new z.ai/DeepSeek conversation awaiting the bridge's protocol prompt

export async function get(key, fallback) {
  const found = await chrome.storage.local.get(key);
  return found[key] === undefined ? fallback : found[key];
}

export async function set(key, value) {
  await chrome.storage.local.set({ [key]: value });
}

export async function remove(key) {
  await chrome.storage.local.remove(key);
}

/** Read-modify-write of one key, serialised per key inside this worker. */
const chains = new Map();
export function update(key, fallback, change) {
  const previous = chains.get(key) ?? Promise.resolve();
  const next = previous.then(async () => {
    const value = await get(key, fallback);
    const changed = await change(value);
    await set(key, changed);
    return changed;
  });
  const settled = next.catch(() => {});
  chains.set(key, settled);
  settled.then(() => {
    if (chains.get(key) === settled) {
      chains.delete(key);
    }
  });
  return next;
}
