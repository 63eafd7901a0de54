"""The results store: one SQLite file in WAL mode, one row per point.

Why SQLite (docs/sweep.md has the long form): it is in the standard library (no extra to
install on every worker), a commit per point is atomic and, in WAL mode with
``synchronous=NORMAL``, survives the writer being killed at any instant (SIGKILL included:
the WAL lives in the OS page cache, only a power cut can lose the last commits), and readers
(``systolic sweep show`` during a run) never block the writer. DuckDB is faster for
analytics but allows one writing process at a time by locking the whole file, and is a
40 MB wheel; our rows are small and few enough (millions at most) for SQLite.

Layout: table ``points`` has ``key`` (primary key: the hash of the point's inputs, the
target and the project version), ``seq`` (the point's place in the sweep), ``status``
(``ok`` or ``failed``), ``error``, ``elapsed_s``, then one column per input and one per
figure, added as they first appear. Table ``meta`` keeps the sweep's description (JSON).

Only one process writes: the sweep's parent takes an exclusive ``flock`` on ``FILE.lock``
for the whole run (released by the kernel when the process dies, however it dies); a second
sweep on the same store is refused with a clear error instead of running points twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sqlite3
from collections.abc import Iterator
from typing import Any

from ..errors import SweepError

__all__ = ["FIXED_COLUMNS", "Store", "point_key", "read_rows"]

FIXED_COLUMNS = ("key", "seq", "status", "error", "elapsed_s")


def point_key(version: str, fingerprint: dict[str, Any], inputs: dict[str, Any]) -> str:
    """SHA-256 (hex, 32 digits) of the project version, the target and the inputs."""
    text = json.dumps({"version": version, "target": fingerprint, "inputs": inputs},
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _connect(path: str) -> sqlite3.Connection:
    con = sqlite3.connect(path, timeout=30.0, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    return con


class Store:
    """A store opened for writing (the lock held until :meth:`close`)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._lock = open(self.path + ".lock", "a+")  # noqa: SIM115 (held until close)
        try:
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise SweepError(f"{self.path}: another sweep is writing this store now; wait for "
                             f"it to finish or use another --out") from None
        try:
            self.con = _connect(self.path)
            self.con.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, "
                             "value TEXT NOT NULL)")
            self.con.execute("CREATE TABLE IF NOT EXISTS points (key TEXT PRIMARY KEY, "
                             "seq INTEGER NOT NULL, status TEXT NOT NULL, error TEXT, "
                             "elapsed_s REAL)")
        except sqlite3.DatabaseError as exc:
            self.close()
            raise SweepError(f"{self.path}: not a results store ({exc})") from None
        self.columns = [r[1] for r in self.con.execute("PRAGMA table_info(points)")]

    def close(self) -> None:
        con = getattr(self, "con", None)
        if con is not None:
            con.close()
            self.con = None  # type: ignore[assignment]
        self._lock.close()  # releases the flock

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def meta(self) -> dict[str, Any]:
        return {k: json.loads(v) for k, v in self.con.execute("SELECT key, value FROM meta")}

    def set_meta(self, **values: Any) -> None:
        with self._transaction():
            for k, v in values.items():
                self.con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                 (k, json.dumps(v, sort_keys=True)))

    def done(self, *, include_failed: bool = True) -> set[str]:
        """Keys of the points already stored (failed ones too, unless told otherwise)."""
        q = "SELECT key FROM points" + ("" if include_failed else " WHERE status = 'ok'")
        return {r[0] for r in self.con.execute(q)}

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self.con.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    def write(self, batch: list[tuple[int, dict[str, Any], dict[str, Any]]]) -> None:
        """Store finished points ``[(seq, inputs, result)]`` (the results of one chunk, which
        arrive together) in one transaction: a kill never half-writes them."""
        with self._transaction():
            for seq, inputs, result in batch:
                values = {"key": result["key"], "seq": seq, "status": result["status"],
                          "error": result["error"], "elapsed_s": result["elapsed_s"],
                          **inputs, **result["figures"]}
                for name in values:
                    if name not in self.columns:
                        self.con.execute(f"ALTER TABLE points ADD COLUMN {_quote(name)}")
                        self.columns.append(name)
                cols = ", ".join(_quote(c) for c in values)
                marks = ", ".join("?" for _ in values)
                self.con.execute(f"INSERT OR REPLACE INTO points ({cols}) VALUES ({marks})",
                                 [_plain(v) for v in values.values()])


def _plain(v: Any) -> Any:
    """A value SQLite stores as itself (numpy scalars become Python ones)."""
    if isinstance(v, bool):
        return int(v)
    if hasattr(v, "item"):
        return v.item()
    return v


def read_rows(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every row of a store (in ``seq`` order) and its meta; readable during a run."""
    name = os.fspath(path)
    if not os.path.isfile(name):
        raise SweepError(f"{name}: no such results store; run systolic sweep FILE.yaml "
                         f"--out {name} first")
    try:
        con = sqlite3.connect(f"file:{name}?mode=ro", uri=True, timeout=30.0)
        try:
            meta = {k: json.loads(v) for k, v in con.execute("SELECT key, value FROM meta")}
            cur = con.execute("SELECT * FROM points ORDER BY seq")
            cols = [d[0] for d in cur.description]
            rows = [dict(zip(cols, r, strict=True)) for r in cur]
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        raise SweepError(f"{name}: not a results store ({exc})") from None
    # A column added for one point is NULL in the rows before it: drop those keys.
    return [{k: v for k, v in r.items() if v is not None or k == "error"} for r in rows], meta
