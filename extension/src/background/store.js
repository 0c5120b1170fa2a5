// The worker's reads and writes of chrome.storage.local, the extension's only durable memory.
// Every key's name comes from lib/storage-keys.js, which also says what each key holds and who
// writes and reads it.
//
// A write-through copy of the keys only the worker writes: a read of such a key is answered from
// memory once it was read or written (every storage call is a round trip to the browser process,
// and a wake went through a dozen of them before it was typed); every write still goes to
// storage and is awaited as before, so what is durable, and when, is unchanged. The keys other
// contexts write (`options` by the options page, `health:*` by the content scripts, `control:*`
// by the side panel) are always read from storage. A change made elsewhere all the same (a test
// writing storage, another extension page) reaches the copy through `chrome.storage.onChanged`:
// a key whose new value differs from the copy is dropped from it and read from storage again.

import * as keys from "../lib/storage-keys.js";

/** Written by other contexts: never answered from the copy. */
function shared(key) {
  return key === keys.OPTIONS || key.startsWith(keys.health.prefix) || key.startsWith("control:");
}

const ABSENT = Symbol("absent");
/** The storage area the copy mirrors (a new one, as in node's tests, starts an empty copy). */
let area = null;
/** key -> the value's JSON text, or ABSENT. */
const copy = new Map();
/** key -> writes and drops so far: a read that raced one of them is not kept. */
const versions = new Map();

function mirror() {
  const local = chrome.storage.local;
  if (local !== area) {
    area = local;
    copy.clear();
    versions.clear();
    chrome.storage.onChanged?.addListener((changes, name) => {
      if (name === "local" && chrome.storage.local === local) {
        changedElsewhere(changes);
      }
    });
  }
}

function changedElsewhere(changes) {
  for (const [key, { newValue }] of Object.entries(changes)) {
    const text = newValue === undefined ? ABSENT : JSON.stringify(newValue);
    if (copy.has(key) && copy.get(key) !== text) {
      bump(key);
      copy.delete(key);
    }
  }
}

function bump(key) {
  versions.set(key, (versions.get(key) ?? 0) + 1);
}

function fromCopy(key, fallback) {
  const text = copy.get(key);
  return text === ABSENT ? fallback : JSON.parse(text);
}

/** Read `names` from storage and keep what no write overtook; `{key: value}` of those found. */
async function readStored(names) {
  const seen = names.map((key) => versions.get(key) ?? 0);
  const found = await chrome.storage.local.get(names);
  names.forEach((key, index) => {
    if (!shared(key) && (versions.get(key) ?? 0) === seen[index]) {
      copy.set(key, found[key] === undefined ? ABSENT : JSON.stringify(found[key]));
    }
  });
  return found;
}

export async function get(key, fallback) {
  mirror();
  if (copy.has(key)) {
    return fromCopy(key, fallback);
  }
  const found = await readStored([key]);
  return found[key] === undefined ? fallback : found[key];
}

/**
 * Several keys in one read (one round trip at most, for the keys not in the copy):
 * `{key: fallback}` in, `{key: value or fallback}` out.
 */
export async function getMany(fallbacks) {
  mirror();
  const missing = Object.keys(fallbacks).filter((key) => !copy.has(key));
  const found = missing.length > 0 ? await readStored(missing) : {};
  return Object.fromEntries(
    Object.entries(fallbacks).map(([key, fallback]) => {
      if (missing.includes(key)) {
        return [key, found[key] === undefined ? fallback : found[key]];
      }
      return [key, fromCopy(key, fallback)];
    }),
  );
}

export async function set(key, value) {
  mirror();
  bump(key);
  if (!shared(key)) {
    copy.set(key, value === undefined ? ABSENT : JSON.stringify(value));
  }
  try {
    await chrome.storage.local.set({ [key]: value });
  } catch (error) {
    bump(key);
    copy.delete(key);
    throw error;
  }
}

export async function remove(key) {
  mirror();
  if (copy.get(key) === ABSENT) {
    return; // known absent (nothing else writes it): no round trip
  }
  bump(key);
  if (!shared(key)) {
    copy.set(key, ABSENT);
  }
  try {
    await chrome.storage.local.remove(key);
  } catch (error) {
    bump(key);
    copy.delete(key);
    throw error;
  }
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
