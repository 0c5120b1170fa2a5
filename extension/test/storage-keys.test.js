// The extension's storage keys have one owner (src/lib/storage-keys.js): its keys are exactly the
// spellings installed extensions hold data under (test/storage-keys.spellings.json, committed
// before the module existed), and no other source file spells a key or reaches a stored value by
// a literal name.

import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import * as keys from "../src/lib/storage-keys.js";

const SRC = fileURLToPath(new URL("../src/", import.meta.url));
const OWNER = "lib/storage-keys.js";
const SPELLINGS = JSON.parse(readFileSync(new URL("./storage-keys.spellings.json", import.meta.url), "utf8")).keys;

/** A spelling with each `<...>` part numbered in order: `bridge:result:<1>:<2>`. */
function pattern(spelling) {
  let part = 0;
  return spelling.replace(/<[^>]+>/g, () => `<${++part}>`);
}

/** What the module makes: a constant as it is, a key family called with `<1>`, `<2>`, ... */
function made() {
  return Object.entries(keys).map(([name, value]) => {
    const spelled = typeof value === "function" ? value(...Array.from({ length: value.length }, (_, index) => `<${index + 1}>`)) : value;
    return { name, spelled };
  });
}

function sources(dir = SRC) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      return sources(path);
    }
    return entry.name.endsWith(".js") ? [{ file: relative(SRC, path), text: readFileSync(path, "utf8") }] : [];
  });
}

/** The code of a file without its comments, lines kept in place (a `//` after `:` is a URL's). */
function code(text) {
  return text.replace(/\/\*[\s\S]*?\*\//g, (comment) => comment.replace(/[^\n]/g, "")).replace(/(^|[^:\\])\/\/.*$/gm, "$1");
}

test("the module makes exactly the keys spelled before it existed, with the same strings", () => {
  const module = made().map((key) => key.spelled);
  const before = Object.keys(SPELLINGS).map(pattern);
  assert.deepEqual([...module].sort(), [...before].sort());
  assert.equal(new Set(module).size, module.length, "two names make the same key");
  for (const { name, spelled } of made()) {
    assert.equal(typeof spelled, "string", name);
  }
});

test("a key family puts its varying part after its prefix, and says its prefix for scans", () => {
  assert.equal(keys.handoff("zai:conv:abc"), "handoff:zai:conv:abc");
  assert.ok(keys.handoff("chatgpt:conv:x").startsWith(keys.handoff.prefix));
  assert.equal(keys.workspace("w1"), "ws:w1");
  assert.equal(keys.bridgeResult("zai:conv:c1", "0".repeat(32)), `bridge:result:zai:conv:c1:${"0".repeat(32)}`);
  for (const [name, value] of Object.entries(keys)) {
    if (typeof value === "function" && value.length === 1) {
      assert.equal(value("x"), `${value.prefix}x`, name);
      assert.ok(Object.isFrozen(value), name);
    }
  }
});

test("no other source file spells a storage key or reads a stored value by a literal name", () => {
  const spelled = made().map((key) => key.spelled);
  const prefixes = [...new Set(spelled.filter((key) => key.includes("<1>")).map((key) => key.slice(0, key.indexOf("<1>"))))];
  const fixed = spelled.filter((key) => !key.includes("<"));
  const quote = "[\"'`]";
  const escape = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const rules = [
    // a key family's prefix starting a string or template literal
    new RegExp(`${quote}(?:${prefixes.map(escape).join("|")})`),
    // a fixed key that is no ordinary word (`control:pinned`, `push:lastSeq`) anywhere in a literal
    new RegExp(`${quote}(?:${fixed.filter((key) => key.includes(":")).map(escape).join("|")})${quote}`),
    // any literal, or an object literal with a plain name, as the key of a storage call
    /(?:\bstore\.(?:get|set|update|remove)|chrome\.storage\.\w+\.(?:get|set|remove))\(\s*(?:["'`]|\{\s*[\w$]+\s*[:,}])/,
    // a stored value taken by its literal name: a storage.onChanged record, or destructuring a get
    /\bchanges\.[\w$]+/,
    /chrome\.storage\.\w+\.get\([^)]*\)\.then\(\(\{/,
    /\}\s*=\s*\(?\s*await chrome\.storage\.\w+\.get\(/,
  ];
  const offences = [];
  for (const { file, text } of sources()) {
    if (file === OWNER) {
      continue;
    }
    code(text)
      .split("\n")
      .forEach((line, index) => {
        if (rules.some((rule) => rule.test(line))) {
          offences.push(`${file}:${index + 1}: ${line.trim()}`);
        }
      });
  }
  assert.deepEqual(offences, [], `${offences.length} places spell keys:\n${offences.join("\n")}`);
});

test("every name a file takes from the module is one it exports", () => {
  const exported = new Set(Object.keys(keys));
  const missing = [];
  for (const { file, text } of sources()) {
    const body = code(text);
    const namespace = /import \* as (\w+) from "[./]*(?:lib\/)?storage-keys\.js"/.exec(body)?.[1];
    if (namespace) {
      const uses = body.replace(/^import .*$/gm, "");
      for (const [, name] of uses.matchAll(new RegExp(`\\b${namespace}\\.(\\w+)`, "g"))) {
        if (!exported.has(name) && name !== "prefix") {
          missing.push(`${file}: ${namespace}.${name}`);
        }
      }
    }
    const named = /import \{([^}]*)\} from "[./]*(?:lib\/)?storage-keys\.js"/.exec(body)?.[1];
    for (const name of named ? named.split(",").map((item) => item.trim()).filter(Boolean) : []) {
      if (!exported.has(name)) {
        missing.push(`${file}: ${name}`);
      }
    }
  }
  assert.deepEqual(missing, []);
});
