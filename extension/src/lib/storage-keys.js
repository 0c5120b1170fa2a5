// The names of everything the extension keeps: chrome.storage.local is its only store (no
// storage.session, storage.sync, IndexedDB or page localStorage), and every key is spelled here
// and nowhere else. Nothing stored is a secret: the bearer stays with the native host.
//
// A key's string never changes: installed extensions hold data under these exact names (the
// spellings are listed in test/storage-keys.spellings.json, which storage-keys.test.js checks).
// A new key is added here, to the table below and to that list.
//
// Plain module with no imports: the worker, the ChatGPT content script (src/lib is web
// accessible there), the side panel and the options page all import it.
//
// key                               holds                                         written by -> read by
// options                           the person's settings {progressTickSec,       options page -> worker, continuity,
//                                   progressFallbackSec, handoff deadlines,         handoff, rollover, content page health
//                                   rollover*, staleAfterSec..., connectorName}   (both watch it with storage.onChanged)
// push:lastSeq                      highest push event seq handled                push-follower
// backoff                           ChatGPT's 429 pause (lib/backoff.js)          ratelimit
// control:pinned                    the Control Center's pinned target            side panel (control.js)
// control:pending                   a send not yet answered (retried with its     side panel
//                                   idempotency key until it is)
// control:last                      the last answered send                        side panel
// ws:<workspace id>                 the workspace's turn (lib/settle.js)          continuity -> continuity, rollover
// wake:<scope>                      woken turn and pending wake (lib/settle.js)   continuity; handoff moves it to the
//                                                                                 target scope at cutover
// progress:<scope>                  last sent summary and its time                continuity
//                                   (lib/progress.js)
// outbox:<scope>                    a progress or quiet text waiting for an       continuity (tick writes, the pump
//                                   idle composer {text, at}                      sends and removes)
// auto:<scope>                      true when Auto is on (absent: off)            worker (panel and HUD switch), handoff
//                                                                                 (target scope) -> continuity, handoff,
//                                                                                 rollover, background page health
// handoff:<scope>                   the scope's latest transfer and its phase     handoff (restore() scans the prefix)
//                                   (lib/handoff-state.js)                        -> rollover
// bridge:dispatched:<scope>         reply keys whose calls were sent (bounded)    bridge -> bridge, handoff (did the
//                                                                                 source use the bridge?)
// bridge:result:<scope>:<reply key> a finished TOOL_RESULT text until the page    bridge
//                                   confirms it sent it
// queue:<conv key>                  the person's queued messages (lib/queue.js)   worker (add, clear), continuity
//                                                                                 (removes sent), handoff (moves it)
// uncertain:<conv key>              true after a send that may or may not have    continuity -> continuity, rollover
//                                   gone out (nothing automatic until a manual
//                                   continue)
// prime:<conv key>                  a handoff's new z.ai/DeepSeek conversation    handoff -> continuity (types the
//                                   awaiting the bridge's protocol prompt         prompt, removes it)
// journal:<conv key>                turn keys already appended (bounded)          journal
// chain:<conv key>                  the continuity_id a handoff's target          handoff -> journal
//                                   conversation journals into
// health:<conv key>                 page health {episode, records, pressure}      content page health; background page
//                                   (content/page-health.js; README "Page         health marks a tab reload executed
//                                   health")                                      -> rollover
// healthRollover:<conv key>         the page-health episode (its startedAt)       rollover
//                                   that started a rollover
// floor:<conv key>                  auto rollover's message-count floor, never    rollover
//                                   lower (lib/rollover.js)

/** A key made of a fixed prefix and one varying part; `.prefix` is for scanning all of them. */
function family(prefix) {
  const name = (part) => `${prefix}${part}`;
  name.prefix = prefix;
  return Object.freeze(name);
}

export const OPTIONS = "options";
export const PUSH_LAST_SEQ = "push:lastSeq";
export const BACKOFF = "backoff";
export const CONTROL_PINNED = "control:pinned";
export const CONTROL_PENDING = "control:pending";
export const CONTROL_LAST = "control:last";

export const workspace = family("ws:");
export const wake = family("wake:");
export const progress = family("progress:");
export const outbox = family("outbox:");
export const auto = family("auto:");
export const handoff = family("handoff:");
export const bridgeDispatched = family("bridge:dispatched:");

/** `bridge:result:<scope>:<reply key>`. */
export function bridgeResult(scope, replyKey) {
  return `bridge:result:${scope}:${replyKey}`;
}

export const queue = family("queue:");
export const uncertain = family("uncertain:");
export const prime = family("prime:");
export const journal = family("journal:");
export const chain = family("chain:");
export const health = family("health:");
export const healthRollover = family("healthRollover:");
export const floor = family("floor:");
