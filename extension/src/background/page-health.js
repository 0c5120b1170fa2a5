// The worker's side of page health (content/page-health.js): the second recovery level,
// chrome.tabs.reload of the asking tab. Accepted only from that tab's own content script, for
// the conversation the tab shows, with Auto on for its scope, and when the durable record
// `health:<conv key>` holds this very pending tab reload not yet executed; the execution time is
// written before the reload, so a restarted worker (or a replayed message) never reloads again.

import * as keys from "../lib/storage-keys.js";
import * as store from "./store.js";

export async function tabReload(tab, message, post) {
  const page = tab.page;
  const refuse = (reason) => post(tab, { type: "health.refused", reason });
  if (!page?.convKey || page.convKey !== message.convKey) {
    return refuse("not this tab's conversation");
  }
  if ((await store.get(keys.auto(page.scope), false)) !== true) {
    return refuse("Auto is off for this scope");
  }
  const key = keys.health(page.convKey);
  let accepted = false;
  await store.update(key, null, (health) => {
    const episode = health?.episode;
    if (!episode || episode.pendingTabReload !== message.at || episode.tabReloadExecutedAt) {
      return health;
    }
    accepted = true;
    return { ...health, episode: { ...episode, tabReloadExecutedAt: Date.now() } };
  });
  if (!accepted) {
    return refuse("no matching pending tab reload");
  }
  await chrome.tabs.reload(tab.tabId);
  return undefined;
}
