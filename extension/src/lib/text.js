// Text the extension cuts or sends (docs/browser-protocol.md section 4, "Text"). A JavaScript
// string is UTF-16: `slice(0, n)` counts code units and can cut between the two halves of a
// surrogate pair (an emoji, a CJK Extension B character), leaving a lone surrogate that UTF-8
// cannot carry. Every cut goes through `cutCodePoints`, which counts code points (as the runtime's
// schemas count `maxLength`) and never splits a pair; `wellFormed` replaces a lone surrogate that
// was already in the text (a page's own title or DOM text can hold one) with U+FFFD.

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/** `text` with every lone surrogate replaced by U+FFFD (pairs kept). */
export function wellFormed(text) {
  const value = String(text ?? "");
  if (typeof value.toWellFormed === "function") {
    return value.toWellFormed();
  }
  return value.replace(LONE_SURROGATE, "\uFFFD");
}

/** The number of code points in `text` (a pair counts once). */
export function codePointLength(text) {
  const value = String(text ?? "");
  return unitsOf(value, Infinity).points;
}

/**
 * `text` cut to at most `max` code points, well-formed. With `ellipsis` (e.g. "…"), a text that
 * had to be cut ends with it, and the whole, ellipsis included, stays within `max` code points.
 */
export function cutCodePoints(text, max, { ellipsis = "" } = {}) {
  const value = wellFormed(text);
  const limit = Math.max(0, Math.floor(max));
  // No more UTF-16 units than the limit means no more code points either.
  if (value.length <= limit || unitsOf(value, limit).units === value.length) {
    return value;
  }
  const mark = codePointLength(ellipsis) <= limit ? ellipsis : "";
  return value.slice(0, unitsOf(value, limit - codePointLength(mark)).units) + mark;
}

/** How many UTF-16 units the first `points` code points of `value` take (`points` counted, at
 * most its code point length). A high surrogate followed by a low one is one code point. */
function unitsOf(value, points) {
  let units = 0;
  let counted = 0;
  while (units < value.length && counted < points) {
    const code = value.charCodeAt(units);
    const next = value.charCodeAt(units + 1);
    units += code >= 0xd800 && code <= 0xdbff && next >= 0xdc00 && next <= 0xdfff ? 2 : 1;
    counted += 1;
  }
  return { units, points: counted };
}
