// The extension's words in the person's language: chrome.i18n with `_locales/en` (the default
// locale) and `_locales/zh_CN`, chosen by the browser's UI language (Chrome picks the catalog;
// nothing here chooses). `t(name, ...values)` is the one way code asks for a text a person sees;
// `localize(root)` fills the extension pages' elements marked `data-i18n` (text),
// `data-i18n-title` and `data-i18n-aria-label`.
//
// Outside Chrome (node's tests) there is no chrome.i18n: `useCatalog(messages)` installs a
// messages.json object and `format` substitutes as Chrome does (`$name$` -> the placeholder's
// content, whose `$1`..`$9` are the values; `$$` is a dollar sign), so the pure modules that
// build texts (lib/messages.js) are tested against the real catalogs.

let catalog = null;

/** Install a messages.json object for `t` where chrome.i18n is absent (tests); null removes it. */
export function useCatalog(messages) {
  catalog = messages;
}

/** Chrome's substitution of one messages.json entry with `values` (strings). */
export function format(entry, values = []) {
  const placeholders = Object.fromEntries(
    Object.entries(entry.placeholders ?? {}).map(([name, placeholder]) => [name.toLowerCase(), placeholder.content]),
  );
  const numbered = (text) => text.replace(/\$(\$|[1-9])/g, (all, which) => (which === "$" ? "$" : String(values[Number(which) - 1] ?? "")));
  return entry.message
    .replace(/\$([A-Za-z0-9_@]+)\$/g, (all, name) => {
      const content = placeholders[name.toLowerCase()];
      return content === undefined ? all : numbered(content);
    })
    .replace(/\$\$/g, "$");
}

/** The text `name` in the person's language, `values` substituted; the name itself when missing. */
export function t(name, ...values) {
  const strings = values.map((value) => String(value));
  const i18n = globalThis.chrome?.i18n;
  if (i18n?.getMessage) {
    return i18n.getMessage(name, strings) || name;
  }
  const entry = catalog?.[name];
  return entry ? format(entry, strings) : name;
}

/** The language of the catalog Chrome chose (`en`, `zh-CN`), for `<html lang>`. */
export function language() {
  return t("htmlLang");
}

/** Fill `root`'s marked elements with their texts (the side panel's and options page's HTML). */
export function localize(root) {
  root.documentElement?.setAttribute("lang", language());
  for (const node of root.querySelectorAll("[data-i18n]")) {
    node.textContent = t(node.dataset.i18n);
  }
  for (const node of root.querySelectorAll("[data-i18n-title]")) {
    node.title = t(node.dataset.i18nTitle);
  }
  for (const node of root.querySelectorAll("[data-i18n-aria-label]")) {
    node.setAttribute("aria-label", t(node.dataset.i18nAriaLabel));
  }
}
