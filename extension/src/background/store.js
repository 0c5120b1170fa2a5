// The worker's reads and writes of chrome.storage.local, the extension's only durable memory.
// Every key's name comes from lib/storage-keys.js, which also says what each key holds and who
// writes and reads it.

export async function get(key, fallback) {
  const found = await chrome.storage.local.get(key);
  return found[key] === undefined ? fallback : found[key];
}

/**
 * Several keys in one read (one round trip to the browser instead of one each): `{key: fallback}`
 * in, `{key: value or fallback}` out.
 */
export async function getMany(fallbacks) {
  const found = await chrome.storage.local.get(Object.keys(fallbacks));
  return Object.fromEntries(Object.entries(fallbacks).map(([key, fallback]) => [key, found[key] === undefined ? fallback : found[key]]));
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
