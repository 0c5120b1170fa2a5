// The parts of chrome.* the worker's modules use, in memory, for node --test; it holds no tests.
// chrome.storage.local follows Chrome's StorageArea as documented
// (developer.chrome.com/docs/extensions/reference/api/storage): get takes one key, a list of
// keys, an object of defaults, or null for everything, and answers an object holding only the keys
// found; set takes an object of keys to values; remove takes a key or a list. Values are stored
// JSON-serialised, as Chrome stores them, so a caller never shares an object with the store.
// Every change is reported to chrome.storage.onChanged listeners (`{key: {oldValue, newValue}}`,
// area "local"), the writes through the API and a test's own writes into the returned Map alike
// (those stand for another extension page writing): Chrome reports a change made anywhere.
// Chrome delivers the event a moment later; here it is delivered at once.
// chrome.tabs.get rejects for a tab id not in `openTabs`, as Chrome does for a closed tab.

const copy = (value) => (value === undefined ? undefined : JSON.parse(JSON.stringify(value)));

/** A Map whose every set, delete and clear is reported to `listeners` as a storage change. */
export class ObservedStorage extends Map {
  constructor(entries, listeners) {
    super(entries);
    this.listeners = listeners;
  }

  set(name, value) {
    const oldValue = super.get(name);
    super.set(name, value);
    this.report({ [name]: { oldValue: copy(oldValue), newValue: copy(value) } });
    return this;
  }

  delete(name) {
    if (!super.has(name)) {
      return false;
    }
    const oldValue = super.get(name);
    super.delete(name);
    this.report({ [name]: { oldValue: copy(oldValue) } });
    return true;
  }

  clear() {
    const changes = Object.fromEntries([...super.entries()].map(([name, value]) => [name, { oldValue: copy(value) }]));
    super.clear();
    this.report(changes);
  }

  report(changes) {
    for (const listener of this.listeners ?? []) {
      listener(changes, "local");
    }
  }
}

/** chrome.storage.onChanged over `listeners`. */
export function changeEvent(listeners) {
  return {
    addListener: (listener) => listeners.add(listener),
    removeListener: (listener) => listeners.delete(listener),
  };
}

/** Installs globalThis.chrome; answers the Map that holds storage.local (name -> value). */
export function installChrome({ stored = {}, openTabs = [], version = "0.1.0" } = {}) {
  const listeners = new Set();
  const local = new ObservedStorage(
    Object.entries(stored).map(([name, value]) => [name, copy(value)]),
    listeners,
  );
  const tabs = new Set(openTabs);
  const pick = (names, defaults = {}) => {
    const found = {};
    for (const name of names) {
      found[name] = local.has(name) ? copy(local.get(name)) : copy(defaults[name]);
      if (found[name] === undefined) {
        delete found[name];
      }
    }
    return found;
  };
  globalThis.chrome = {
    storage: {
      onChanged: changeEvent(listeners),
      local: {
        async get(keys) {
          if (keys === null || keys === undefined) {
            return pick([...local.keys()]);
          }
          if (typeof keys === "string") {
            return pick([keys]);
          }
          if (Array.isArray(keys)) {
            return pick(keys);
          }
          return pick(Object.keys(keys), keys);
        },
        async set(values) {
          for (const [name, value] of Object.entries(values)) {
            local.set(name, copy(value));
          }
        },
        async remove(keys) {
          for (const name of Array.isArray(keys) ? keys : [keys]) {
            local.delete(name);
          }
        },
      },
    },
    tabs: {
      async get(tabId) {
        if (!tabs.has(tabId)) {
          throw new Error(`No tab with id: ${tabId}.`);
        }
        return { id: tabId };
      },
    },
    runtime: { getManifest: () => ({ manifest_version: 3, version }) },
  };
  return local;
}
