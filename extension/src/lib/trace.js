// Arrival stamps of a wake's path, as User Timing marks (`performance.mark`), which
// benchmarks/wake_bench.py reads to say where a wake's time goes: in the worker (a push event
// received, a send posted to a tab) and in the content scripts (a send received, typing started).
// A content script's marks land on its page's own timeline (the isolated world shares the
// document's `performance`), so the page's scripts could read them; they hold only the stage, a
// push seq or a send id. One mark is kept per name (the previous one is cleared), so nothing
// grows; a stamp costs microseconds and changes nothing the extension does.

/** Stamp `name` now, with `detail` (a small plain object); the previous stamp of `name` goes. */
export function mark(name, detail = null) {
  try {
    performance.clearMarks(name);
    performance.mark(name, { detail });
  } catch {
    // no User Timing here (an old engine): nothing is stamped
  }
}
