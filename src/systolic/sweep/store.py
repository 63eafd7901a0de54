"""The results store: one SQLite file in WAL mode, one row per point.

Why SQLite (docs/sweep.md has the long form): it is in the standard library (no extra to
install on every worker), a commit per point is atomic and, in WAL mode with
``synchronous=NORMAL``, survives the writer being killed at any instant (SIGKILL included:
the WAL lives in the OS page cache, only a power cut can lose the last commits), and readers
(``systolic sweep show`` during a run) never block the writer. DuckDB is faster for
analytics but allows one writing process at a time by locking the whole file, and is a
40 MB wheel; our rows are small and few enough (millions at most) for SQLite.

Layout: table ``points`` has ``key`` (primary key: the hash of the point's inputs, the
target's fingerprint and the project version), ``seq`` (the point's place in the sweep),
``status`` (``ok`` or ``failed``), ``error``, ``elapsed_s``, ``sweep_id`` (the definition of
the sweep the row last belonged to), then one column per input and one per figure, added as
they first appear. Table ``meta`` keeps the sweep's description (JSON), ``sweep_id`` among it:
readers show only the rows of that sweep unless asked for every row (issue 21 defect 3: an
edited kernel or changed args must not rank stale rows beside fresh ones).

Only one process writes: the sweep's parent takes an exclusive ``flock`` on ``FILE.lock``
for the whole run (released by the kernel when the process dies, however it dies); a second
sweep on the same store is refused with a clear error instead of running points twice. A
write lock held by another program (an open ``sqlite3`` session) is refused at once when the
store opens. On close the store leaves WAL mode: no ``-wal``/``-shm`` files stay behind, and
a reader in a read-only directory (which cannot create ``-shm``) opens it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import SweepError

__all__ = ["FIXED_COLUMNS", "Store", "StoreView", "point_key", "read_rows", "read_store"]

FIXED_COLUMNS = ("key", "seq", "status", "error", "elapsed_s", "sweep_id")
# How long opening waits for another program's write lock (refused after: issue 22), and how
# long a write in the middle of a run waits for it before the run stops with an error.
OPEN_WAIT_S = 1.0
WRITE_WAIT_S = 30.0


def point_key(version: str, fingerprint: dict[str, Any], inputs: dict[str, Any]) -> str:
    """SHA-256 (hex, 32 digits) of the project version, the target and the inputs."""
    text = json.dumps({"version": version, "target": fingerprint, "inputs": inputs},
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _locked(exc: sqlite3.Error) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def _lock_error(path: str) -> SweepError:
    return SweepError(f"{path}: another program holds a write lock on this store (an open "
                      f"sqlite3 session?); close it, or use another --out")


def _check_schema(con: sqlite3.Connection, path: str) -> bool:
    """True if the file holds a results store, False if it is empty; else a SweepError."""
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        return False
    ours = {"meta", "points"} & tables
    if ours != {"meta", "points"}:
        have = ", ".join(sorted(tables))
        missing = " and ".join(sorted({"meta", "points"} - tables))
        raise SweepError(f"{path}: not a results store (it has the tables {have}, no "
                         f"{missing}); use another --out")
    meta_cols = [r[1] for r in con.execute("PRAGMA table_info(meta)")]
    point_cols = {r[1] for r in con.execute("PRAGMA table_info(points)")}
    if meta_cols != ["key", "value"] or not set(FIXED_COLUMNS[:5]) <= point_cols:
        raise SweepError(f"{path}: not a results store (its meta or points table has other "
                         f"columns); use another --out")
    return True


class Store:
    """A store opened for writing (the lock held until :meth:`close`). ``notice`` is told
    when a write waits for another program's write lock."""

    def __init__(self, path: str | os.PathLike[str],
                 notice: Callable[[str], None] | None = None) -> None:
        self.path = os.fspath(path)
        self.notice = notice
        folder = os.path.dirname(self.path) or "."
        if not os.path.isdir(folder):
            raise SweepError(f"{self.path}: the directory {folder} does not exist")
        if os.path.isdir(self.path):
            raise SweepError(f"{self.path} is a directory; name a file for the results store")
        try:
            self._lock = open(self.path + ".lock", "a+")  # noqa: SIM115 (held until close)
        except OSError as exc:
            raise SweepError(f"{self.path}: cannot create its lock file beside it "
                             f"({exc.strerror or exc})") from None
        try:
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise SweepError(f"{self.path}: another sweep is writing this store now; wait for "
                             f"it to finish or use another --out") from None
        try:
            # the INSERT of each set of column names (issue 20: building it, and looking
            # up each of a point's ~100 names in the column list, was a fifth of a write)
            self._inserts: dict[tuple[str, ...], str] = {}
            self.con = sqlite3.connect(self.path, timeout=OPEN_WAIT_S, isolation_level=None)
            self.con.execute("PRAGMA journal_mode=WAL")
            self.con.execute("PRAGMA synchronous=NORMAL")
            with self._transaction():
                if not _check_schema(self.con, self.path):
                    self.con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, "
                                     "value TEXT NOT NULL)")
                    self.con.execute("CREATE TABLE points (key TEXT PRIMARY KEY, "
                                     "seq INTEGER NOT NULL, status TEXT NOT NULL, error TEXT, "
                                     "elapsed_s REAL, sweep_id TEXT)")
                self.columns = [r[1] for r in self.con.execute("PRAGMA table_info(points)")]
                if "sweep_id" not in self.columns:  # a store written before sweep ids
                    self.con.execute("ALTER TABLE points ADD COLUMN sweep_id TEXT")
                    self.columns.append("sweep_id")
        except SweepError:
            self.close()
            raise
        except sqlite3.DatabaseError as exc:
            self.close()
            if _locked(exc):
                raise _lock_error(self.path) from None
            raise SweepError(f"{self.path}: not a results store ({exc})") from None

    def close(self) -> None:
        con = getattr(self, "con", None)
        if con is not None:
            # back to a rollback journal: the WAL is folded in and -wal/-shm removed (left
            # in WAL mode if a reader has the file open now; the next close folds it)
            with contextlib.suppress(sqlite3.Error):
                con.execute("PRAGMA busy_timeout = 0")
                con.execute("PRAGMA journal_mode=DELETE")
            con.close()
            self.con = None  # type: ignore[assignment]
        self._lock.close()  # releases the flock

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def meta(self) -> dict[str, Any]:
        return _meta(self.con, self.path)

    def set_meta(self, **values: Any) -> None:
        with self._transaction():
            for k, v in values.items():
                self.con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                 (k, json.dumps(v, sort_keys=True)))

    def stored(self) -> dict[str, tuple[bool, str | None]]:
        """Every stored key -> (it ran ok, the sweep id of its row)."""
        q = "SELECT key, status = 'ok', sweep_id FROM points"
        return {k: (bool(ok), sid) for k, ok, sid in self.con.execute(q)}

    def done(self, *, include_failed: bool = True) -> set[str]:
        """Keys of the points already stored (failed ones too, unless told otherwise)."""
        return {k for k, (ok, _) in self.stored().items() if ok or include_failed}

    def claim(self, keys: list[str], sweep_id: str) -> None:
        """Mark stored rows as rows of the sweep ``sweep_id`` (points it skips as done)."""
        if keys:
            with self._transaction():
                self.con.executemany("UPDATE points SET sweep_id = ? WHERE key = ?",
                                     [(sweep_id, k) for k in keys])

    def _begin(self) -> None:
        """BEGIN IMMEDIATE: refused at once while the store opens; in a run, another
        program's write lock is waited for up to WRITE_WAIT_S, saying so after the first
        second (issue 22: the run stalled 30 s without a word, then failed)."""
        try:
            self.con.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if not _locked(exc):
                raise
            if not hasattr(self, "columns"):  # still opening: refused at once
                raise _lock_error(self.path) from None
        if self.notice is not None:
            self.notice(f"{self.path}: another program holds a write lock on this store; "
                        f"waiting up to {WRITE_WAIT_S:g} s for it")
        self.con.execute(f"PRAGMA busy_timeout = {int((WRITE_WAIT_S - OPEN_WAIT_S) * 1000)}")
        try:
            self.con.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if not _locked(exc):
                raise
            raise SweepError(f"{self.path}: another program held a write lock on this "
                             f"store for {WRITE_WAIT_S:g} s; the sweep stopped (run it "
                             f"again to resume)") from None
        finally:
            self.con.execute(f"PRAGMA busy_timeout = {int(OPEN_WAIT_S * 1000)}")

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self._begin()
        try:
            yield
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    def write(self, batch: list[tuple[int, dict[str, Any], dict[str, Any]]],
              sweep_id: str | None = None) -> None:
        """Store finished points ``[(seq, inputs, result)]`` (the results of one chunk, which
        arrive together) in one transaction: a kill never half-writes them. A point already
        stored (a failed one run again) is replaced."""
        try:
            self._write(batch, sweep_id)
        except BaseException:
            # rolled back: a column added in the transaction is gone again, and so must be
            # every INSERT that names it
            self._inserts.clear()
            with contextlib.suppress(sqlite3.Error):
                self.columns = [r[1] for r in self.con.execute("PRAGMA table_info(points)")]
            raise

    def _write(self, batch: list[tuple[int, dict[str, Any], dict[str, Any]]],
               sweep_id: str | None) -> None:
        with self._transaction():
            for seq, inputs, result in batch:
                values = {"key": result["key"], "seq": seq, "status": result["status"],
                          "error": result["error"], "elapsed_s": result["elapsed_s"],
                          "sweep_id": sweep_id, **inputs, **result["figures"]}
                names = tuple(values)
                sql = self._inserts.get(names)
                if sql is None:  # a new set of columns (a sweep's points share one or two)
                    for name in names:
                        if name not in self.columns:
                            self.con.execute(f"ALTER TABLE points ADD COLUMN {_quote(name)}")
                            self.columns.append(name)
                    cols = ", ".join(_quote(c) for c in names)
                    marks = ", ".join("?" for _ in names)
                    sql = self._inserts[names] = (f"INSERT OR REPLACE INTO points ({cols}) "
                                                  f"VALUES ({marks})")
                self.con.execute(sql, [_plain(v) for v in values.values()])


def _meta(con: sqlite3.Connection, path: str) -> dict[str, Any]:
    try:
        return {k: json.loads(v) for k, v in con.execute("SELECT key, value FROM meta")}
    except (json.JSONDecodeError, TypeError) as exc:
        raise SweepError(f"{path}: not a results store (its meta table does not hold JSON: "
                         f"{exc})") from None


def _plain(v: Any) -> Any:
    """A value SQLite stores as itself (numpy scalars become Python ones)."""
    tp = type(v)
    if tp is float or tp is int or tp is str or v is None:  # most figures: no lookup
        return v
    if isinstance(v, bool):
        return int(v)
    if hasattr(v, "item"):
        return v.item()
    return v


@dataclasses.dataclass(frozen=True, slots=True)
class StoreView:
    """What a reader sees: the rows (in ``seq`` order), the meta, and how many rows of
    earlier versions of the sweep were left out (0 when every row was asked for)."""

    rows: list[dict[str, Any]]
    meta: dict[str, Any]
    hidden: int


def _read_lock_error(name: str) -> SweepError:
    return SweepError(f"{name}: another program held a write lock on this store for "
                      f"{WRITE_WAIT_S:g} s (an open sqlite3 session?); close it and read the "
                      f"store again")


def _open_ro(name: str, notice: Callable[[str], None] | None = None) -> sqlite3.Connection:
    """A read-only connection; a store in WAL mode in a directory this process may not write
    (no ``-shm`` can be made there) is opened immutable when it has no WAL to read. A store
    another program holds a write lock on (a rollback-journal store under an open
    ``sqlite3`` session's transaction blocks readers) is waited for up to
    :data:`WRITE_WAIT_S`, saying so through ``notice`` after the first second (issue 22:
    ``show`` waited 30 s without a word)."""
    for wait in (OPEN_WAIT_S, WRITE_WAIT_S - OPEN_WAIT_S):
        try:
            con = sqlite3.connect(f"file:{name}?mode=ro", uri=True, timeout=wait)
            try:
                con.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except BaseException:
                con.close()
                raise
            return con
        except sqlite3.OperationalError as exc:
            if _locked(exc) and wait == OPEN_WAIT_S:
                if notice is not None:
                    notice(f"{name}: another program holds a write lock on this store; "
                           f"waiting up to {WRITE_WAIT_S:g} s for it")
                continue
            if _locked(exc):
                raise _read_lock_error(name) from None
            if os.access(os.path.dirname(name) or ".", os.W_OK) or os.path.exists(
                    name + "-wal"):
                raise
            break
    return sqlite3.connect(f"file:{name}?immutable=1", uri=True)


def read_store(path: str | os.PathLike[str], *, every: bool = False,
               notice: Callable[[str], None] | None = None) -> StoreView:
    """The rows of the store's current sweep (every row with ``every``) and its meta;
    readable during a run. ``notice`` is told when the read waits for another program's
    write lock."""
    name = os.fspath(path)
    if not os.path.isfile(name):
        raise SweepError(f"{name}: no such results store; run systolic sweep FILE.yaml "
                         f"--out {name} first")
    try:
        con = _open_ro(name, notice)
        try:
            tables = {r[0] for r in
                      con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not {"meta", "points"} <= tables:
                missing = " and ".join(sorted({"meta", "points"} - tables))
                raise SweepError(f"{name}: not a results store (it has no {missing} table)")
            meta = _meta(con, name)
            cols = {r[1] for r in con.execute("PRAGMA table_info(points)")}
            sid = meta.get("sweep_id")
            where: str = ""
            params: tuple[str, ...] = ()
            if not every and sid is not None and "sweep_id" in cols:
                where, params = " WHERE sweep_id = ?", (str(sid),)
            cur = con.execute(f"SELECT * FROM points{where} ORDER BY seq", params)
            names = [d[0] for d in cur.description]
            rows = [dict(zip(names, r, strict=True)) for r in cur]
            total = int(con.execute("SELECT count(*) FROM points").fetchone()[0])
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        if _locked(exc):
            raise _read_lock_error(name) from None
        raise SweepError(f"{name}: not a results store ({exc})") from None
    # A column added for one point is NULL in the rows before it: drop those keys.
    clean = [{k: v for k, v in r.items() if v is not None or k == "error"} for r in rows]
    return StoreView(clean, meta, total - len(rows))


def read_rows(path: str | os.PathLike[str], *, every: bool = False
              ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows of the store's current sweep (in ``seq`` order; every row with ``every``)
    and its meta; readable during a run."""
    view = read_store(path, every=every)
    return view.rows, view.meta
