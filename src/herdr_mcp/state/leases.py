"""Named leases in `state.db`: which of the runtimes sharing the database does a job alone.

Two runtime generations run side by side after an activation (the previous one stays up for
rollback), both following the same Herdr. Whatever they derive from Herdr and write down once
(push transitions, the event log behind herdr_since) is written by the holder of that job's
lease only, so one Herdr change is never recorded twice. The holder renews its lease; a lease
whose holder's process is gone, or that was not renewed in time, is taken over.

The leases share the `push_lease` table (migration 4; its `name` column keys them).
"""

from __future__ import annotations

import os
import time

from herdr_mcp.state.store import StateStore


def _now_ms() -> int:
    return int(time.time() * 1000)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Lease:
    """One named lease."""

    def __init__(self, store: StateStore, name: str) -> None:
        self._store = store
        self.name = name

    def hold(self, owner: str, ttl_s: float, pid: int | None = None) -> bool:
        """Take or renew the lease for `owner`; whether `owner` holds it now. A lease held by
        another owner is taken over once it expired or its process is gone."""
        pid = os.getpid() if pid is None else pid
        now = _now_ms()
        with self._store.transaction() as tx:
            row = tx.execute(
                "SELECT owner, pid, expires_at FROM push_lease WHERE name = ?", (self.name,)
            ).fetchone()
            held = row is not None and row["owner"] != owner
            if held and row["expires_at"] > now and pid_alive(int(row["pid"])):
                return False
            tx.execute(
                """INSERT INTO push_lease (name, owner, pid, expires_at) VALUES (?, ?, ?, ?)
                   ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, pid = excluded.pid,
                       expires_at = excluded.expires_at""",
                (self.name, owner, pid, now + round(ttl_s * 1000)),
            )
        return True

    def release(self, owner: str) -> None:
        with self._store.transaction() as tx:
            tx.execute("DELETE FROM push_lease WHERE name = ? AND owner = ?", (self.name, owner))
