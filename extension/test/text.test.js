import assert from "node:assert/strict";
import { test } from "node:test";

import { codePointLength, cutCodePoints, wellFormed } from "../src/lib/text.js";

const EMOJI = "\u{1F600}"; // two UTF-16 units
const EXT_B = "\u{20000}"; // a CJK Extension B ideograph, two units

function isWellFormed(text) {
  return !/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(text);
}

test("a title of 199 ASCII characters and an emoji is never cut inside the pair", () => {
  const title = "a".repeat(199) + EMOJI + "tail";
  // What `title.slice(0, 200)` did: a lone high surrogate at the end.
  assert.equal(isWellFormed(title.slice(0, 200)), false);
  const cut = cutCodePoints(title, 200);
  assert.equal(isWellFormed(cut), true);
  assert.equal(cut, "a".repeat(199) + EMOJI);
  assert.equal(codePointLength(cut), 200);
});

test("the limit counts code points, as the runtime's maxLength does", () => {
  const text = EMOJI.repeat(300);
  const cut = cutCodePoints(text, 200);
  assert.equal(codePointLength(cut), 200);
  assert.equal(cut.length, 400);
  assert.equal(cutCodePoints(EXT_B.repeat(3), 2), EXT_B.repeat(2));
  assert.equal(cutCodePoints("中文标题", 2), "中文");
});

test("short text is returned as it is, and nothing is cut at exactly the limit", () => {
  assert.equal(cutCodePoints("short", 200), "short");
  assert.equal(cutCodePoints(EMOJI.repeat(200), 200), EMOJI.repeat(200));
  assert.equal(cutCodePoints("", 10), "");
  assert.equal(cutCodePoints(undefined, 10), "");
  assert.equal(cutCodePoints("abc", 0), "");
});

test("an ellipsis marks a cut and stays within the limit", () => {
  assert.equal(cutCodePoints("abcdef", 4, { ellipsis: "…" }), "abc…");
  assert.equal(cutCodePoints("abc", 4, { ellipsis: "…" }), "abc");
  assert.equal(cutCodePoints("abcd", 4, { ellipsis: "…" }), "abcd");
  const cut = cutCodePoints(`${"x".repeat(238)}${EMOJI}${EMOJI}${EMOJI}`, 240, { ellipsis: "…" });
  assert.equal(cut, `${"x".repeat(238)}${EMOJI}…`);
  assert.equal(isWellFormed(cut), true);
});

test("lone surrogates already in the text become U+FFFD; pairs stay", () => {
  assert.equal(wellFormed("a\uD800b"), "a\uFFFDb");
  assert.equal(wellFormed("a\uDC00b"), "a\uFFFDb");
  assert.equal(wellFormed(`x${EMOJI}\uD83D`), `x${EMOJI}\uFFFD`);
  assert.equal(wellFormed("\uDE00\uD83D"), "\uFFFD\uFFFD");
  assert.equal(cutCodePoints("\uD800abc", 2), "\uFFFDa");
  // The same answer without String.prototype.toWellFormed (Chrome before 111).
  const native = String.prototype.toWellFormed;
  try {
    delete String.prototype.toWellFormed;
    assert.equal(wellFormed(`a\uD800b${EMOJI}\uDFFF`), `a\uFFFDb${EMOJI}\uFFFD`);
  } finally {
    if (native) {
      String.prototype.toWellFormed = native;
    }
  }
});

test("every cut of a mixed string is well-formed", () => {
  const text = `a${EMOJI}b${EXT_B}中\uD800${EMOJI}`;
  for (let max = 0; max <= 10; max += 1) {
    const cut = cutCodePoints(text, max);
    assert.equal(isWellFormed(cut), true, `max ${max}`);
    assert.ok(codePointLength(cut) <= max, `max ${max}`);
  }
});
