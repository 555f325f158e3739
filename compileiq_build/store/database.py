"""The results store: SQLite under <build>/compileiq/, every sample committed as it lands."""

from __future__ import annotations

import functools
import json
import os
import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from filelock import FileLock, Timeout

from compileiq_build.errors import CompileIQError
from compileiq_build.project.workspace import Workspace
from compileiq_build.store.records import KernelTime, Sample

if TYPE_CHECKING:
    import pandas as pd

SCHEMA = 6

_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
  id INTEGER PRIMARY KEY, started REAL NOT NULL, command TEXT NOT NULL, environment TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS evaluations (
  id INTEGER PRIMARY KEY,
  session_id INTEGER NOT NULL REFERENCES sessions(id),
  target TEXT NOT NULL, arch_keys TEXT NOT NULL, config_key TEXT NOT NULL,
  config TEXT NOT NULL, flags TEXT NOT NULL, strategy TEXT NOT NULL, phase TEXT NOT NULL,
  started REAL NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '',
  build_seconds REAL, digest TEXT NOT NULL DEFAULT '', same_as INTEGER,
  features TEXT NOT NULL DEFAULT '{}', worker TEXT NOT NULL DEFAULT '', finished REAL,
  parent TEXT NOT NULL DEFAULT '', proposed_by TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS samples (
  id INTEGER PRIMARY KEY,
  evaluation_id INTEGER NOT NULL REFERENCES evaluations(id),
  workload TEXT NOT NULL, role TEXT NOT NULL, rep INTEGER NOT NULL,
  value REAL, cost REAL, wall_s REAL NOT NULL, exit_code INTEGER, error TEXT NOT NULL,
  created REAL NOT NULL, gpu TEXT NOT NULL DEFAULT '{}');
CREATE INDEX IF NOT EXISTS samples_by_evaluation ON samples(evaluation_id);
CREATE TABLE IF NOT EXISTS kernel_times (
  id INTEGER PRIMARY KEY,
  session_id INTEGER NOT NULL REFERENCES sessions(id),
  target TEXT NOT NULL, arch_keys TEXT NOT NULL, workload TEXT NOT NULL, kernel TEXT NOT NULL,
  seconds REAL NOT NULL, launches INTEGER NOT NULL, source TEXT NOT NULL, unit TEXT NOT NULL);
"""

# Older stores gain the columns added since: schema 2 the GPU state of each sample, schema 3
# the code digest, the same-code reference and the compile-time features of each evaluation,
# schema 4 the worker (GPU) that measured it and when it finished (`started` is when its build began),
# schema 5 the configuration a minimizing step was reduced from, schema 6 the strategy's phase
# that proposed a search evaluation (a strategy decides from its history alone).
_MIGRATIONS = {
    "1": ["ALTER TABLE samples ADD COLUMN gpu TEXT NOT NULL DEFAULT '{}'"],
    "2": ["ALTER TABLE evaluations ADD COLUMN digest TEXT NOT NULL DEFAULT ''",
          "ALTER TABLE evaluations ADD COLUMN same_as INTEGER",
          "ALTER TABLE evaluations ADD COLUMN features TEXT NOT NULL DEFAULT '{}'"],
    "3": ["ALTER TABLE evaluations ADD COLUMN worker TEXT NOT NULL DEFAULT ''",
          "ALTER TABLE evaluations ADD COLUMN finished REAL"],
    "4": ["ALTER TABLE evaluations ADD COLUMN parent TEXT NOT NULL DEFAULT ''"],
    "5": ["ALTER TABLE evaluations ADD COLUMN proposed_by TEXT NOT NULL DEFAULT ''"],
}

# Evaluation status values.
RUNNING, MEASURED, BUILD_FAILED, INVALID, INTERRUPTED = (
    "running", "measured", "build_failed", "invalid", "interrupted")
COMPILED = "compiled"  # phase scout: compiled ahead for its code and features, not measured
SCOUT = "scout"  # the phase of configurations compiled ahead (pipeline.py)


@dataclass(frozen=True)
class EvaluationRow:
    id: int
    target: str
    arch_keys: dict[str, str]  # language -> sm_90 / x86_64
    config_key: str
    config: dict[str, str]
    flags: dict[str, list[str]]
    strategy: str
    phase: str
    status: str
    reason: str
    build_seconds: float | None
    digest: str = ""
    same_as: int | None = None  # the evaluation whose samples stand for this one (same code)
    features: dict[str, float] | None = None
    worker: str = ""  # "gpu0", "cpu", "ray:<node>/gpu0"
    parent: str = ""  # the configuration key this one was reduced from (minimize) or refines (search)
    proposed_by: str = ""  # phase search: the strategy's phase that proposed it ("screen", ...)
    finished: float | None = None  # when it ended; None while running (and in stores before schema 4)


_EVALUATION_COLUMNS = ("id, target, arch_keys, config_key, config, flags, strategy, phase, status, reason,"
                       " build_seconds, digest, same_as, features, worker, parent, proposed_by, finished")


def _evaluation_row(r: Sequence[Any]) -> EvaluationRow:
    return EvaluationRow(r[0], r[1], json.loads(r[2]), r[3], json.loads(r[4]), json.loads(r[5]), r[6], r[7],
                         r[8], r[9], r[10], r[11], r[12], json.loads(r[13]), r[14], r[15], r[16], r[17])


def arch_json(arch_keys: Mapping[str, str]) -> str:
    return json.dumps(dict(arch_keys), sort_keys=True)


def damaged(path: Path, exc: sqlite3.DatabaseError) -> CompileIQError:
    return CompileIQError(
        f"the results store {path} is damaged ({exc}). It was left untouched: move it away (it "
        "may still be read with sqlite3) and run tune again.")


P = ParamSpec("P")
R = TypeVar("R")


def _locked(method: Callable[P, R]) -> Callable[P, R]:
    """One thread at a time on the connection: workers measure from threads of their own."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        store: Store = args[0]  # type: ignore[assignment]
        with store._lock:
            try:
                return method(*args, **kwargs)
            except sqlite3.DatabaseError as exc:
                # Damage that the check on opening missed (or since): not a traceback.
                if type(exc) is not sqlite3.DatabaseError:  # locked, constraint: a bug of ours
                    raise
                raise damaged(store.snapshot_of or store.path, exc) from None

    return wrapper


class Store:
    def __init__(self, path: Path, snapshot_of: Path | None = None) -> None:
        self.path = path
        self._lock = threading.RLock()
        # A snapshot (read_store) lies alone in a temporary folder, removed on close.
        self.snapshot_of = snapshot_of
        shown = snapshot_of or path
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            # Damage beyond the header shows only when a query reaches it: look at every page
            # before anything is written.
            if (check := self.db.execute("PRAGMA quick_check").fetchone()) and check[0] != "ok":
                raise sqlite3.DatabaseError(check[0])
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(_DDL)
            row = self.db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if row is None:
                self.db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA),))
            elif row[0] in _MIGRATIONS:
                with self._tx() as db:
                    for version in range(int(row[0]), SCHEMA):
                        for statement in _MIGRATIONS[str(version)]:
                            db.execute(statement)
                    db.execute("UPDATE meta SET value=? WHERE key='schema'", (str(SCHEMA),))
            elif row[0] != str(SCHEMA):
                raise CompileIQError(
                    f"{shown} holds results of store schema {row[0]}; this version writes {SCHEMA}. "
                    "Use the compileiq_build version that wrote it, or move the file away.")
        except sqlite3.DatabaseError as exc:
            if hasattr(self, "db"):
                self.db.close()
            raise damaged(shown, exc) from None

    @_locked
    def close(self) -> None:
        self.db.close()
        if self.snapshot_of:
            shutil.rmtree(self.path.parent, ignore_errors=True)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    @_locked
    def start_session(self, command: str, environment: Mapping[str, object]) -> int:
        with self._tx() as db:
            # An evaluation left 'running' by a killed tune is marked; its samples stay.
            db.execute("UPDATE evaluations SET status=? WHERE status=?", (INTERRUPTED, RUNNING))
            cur = db.execute("INSERT INTO sessions (started, command, environment) VALUES (?,?,?)",
                             (time.time(), command, json.dumps(environment, sort_keys=True)))
        return int(cur.lastrowid or 0)

    @_locked
    def update_session(self, session: int, key: str, value: Mapping[str, object]) -> None:
        """Merge `value` into the session environment's `key` (what a run learns as it goes)."""
        with self._tx() as db:
            (text,) = db.execute("SELECT environment FROM sessions WHERE id=?", (session,)).fetchone()
            env = json.loads(text)
            env[key] = {**env.get(key, {}), **value}
            db.execute("UPDATE sessions SET environment=? WHERE id=?",
                       (json.dumps(env, sort_keys=True), session))

    @_locked
    def begin_evaluation(self, session: int, target: str, arch_keys: Mapping[str, str],
                         config_key: str,
                         config: Mapping[str, str], flags: Mapping[str, tuple[str, ...]],
                         strategy: str, phase: str, worker: str = "", started: float | None = None,
                         parent: str = "", proposed_by: str = "") -> int:
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO evaluations (session_id, target, arch_keys, config_key, config, flags,"
                " strategy, phase, started, status, worker, parent, proposed_by)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (session, target, arch_json(arch_keys), config_key,
                 json.dumps(dict(config), sort_keys=True),
                 json.dumps({k: list(v) for k, v in flags.items()}, sort_keys=True),
                 strategy, phase, started or time.time(), RUNNING, worker, parent, proposed_by))
        return int(cur.lastrowid or 0)

    @_locked
    def finish_evaluation(self, evaluation: int, status: str, reason: str = "",
                          build_seconds: float | None = None) -> None:
        with self._tx() as db:
            db.execute("UPDATE evaluations SET status=?, reason=?, build_seconds=COALESCE(?, build_seconds),"
                       " finished=? WHERE id=?", (status, reason, build_seconds, time.time(), evaluation))

    @_locked
    def add_sample(self, evaluation: int, role: str, rep: int, sample: Sample) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO samples (evaluation_id, workload, role, rep, value, cost, wall_s,"
                " exit_code, error, created, gpu) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (evaluation, sample.workload, role, rep, sample.value, sample.cost, sample.wall_s,
                 sample.exit_code, sample.error, time.time(), json.dumps(sample.gpu, sort_keys=True)))

    @_locked
    def evaluations(self, target: str | None = None, arch_keys: Mapping[str, str] | None = None,
                    phase: str | None = None) -> list[EvaluationRow]:
        query = f"SELECT {_EVALUATION_COLUMNS} FROM evaluations WHERE 1=1"
        args: list[object] = []
        arch = arch_json(arch_keys) if arch_keys is not None else None
        for column, value in (("target", target), ("arch_keys", arch), ("phase", phase)):
            if value is not None:
                query += f" AND {column}=?"
                args.append(value)
        return [_evaluation_row(r) for r in self.db.execute(query + " ORDER BY id", args).fetchall()]

    @_locked
    def set_code(self, evaluation: int, digest: str, features: Mapping[str, float],
                 same_as: int | None) -> None:
        with self._tx() as db:
            db.execute("UPDATE evaluations SET digest=?, features=?, same_as=? WHERE id=?",
                       (digest, json.dumps(dict(features), sort_keys=True), same_as, evaluation))

    @_locked
    def evaluation(self, evaluation: int) -> EvaluationRow:
        row = self.db.execute(f"SELECT {_EVALUATION_COLUMNS} FROM evaluations WHERE id=?",
                              (evaluation,)).fetchone()
        return _evaluation_row(row)

    @_locked
    def samples(self, evaluation: int) -> list[tuple[str, str, int, float | None, str]]:
        """(workload, role, rep, cost, error) in the order they were taken."""
        return self.db.execute(
            "SELECT workload, role, rep, cost, error FROM samples WHERE evaluation_id=? ORDER BY id",
            (evaluation,)).fetchall()

    @_locked
    def add_kernel_times(self, session: int, target: str, arch_keys: Mapping[str, str],
                         rows: Sequence[KernelTime]) -> None:
        """A benchmark's profile (profile.py) for a CMake target, in one transaction."""
        with self._tx() as db:
            db.executemany(
                "INSERT INTO kernel_times (session_id, target, arch_keys, workload, kernel, seconds,"
                " launches, source, unit) VALUES (?,?,?,?,?,?,?,?,?)",
                [(session, target, arch_json(arch_keys), r.workload, r.kernel, r.seconds, r.launches,
                  r.source, r.unit) for r in rows])

    @_locked
    def kernel_times(self, target: str, arch_keys: Mapping[str, str]) -> list[KernelTime]:
        """The stored profiles of a CMake target, most time first per benchmark."""
        rows = self.db.execute(
            "SELECT workload, kernel, seconds, launches, source, unit FROM kernel_times"
            " WHERE target=? AND arch_keys=? ORDER BY id", (target, arch_json(arch_keys))).fetchall()
        return [KernelTime(*r) for r in rows]

    @_locked
    def profiled(self) -> list[tuple[str, dict[str, str]]]:
        """Every (CMake target, architecture) the store holds a profile of."""
        rows = self.db.execute(
            "SELECT DISTINCT target, arch_keys FROM kernel_times ORDER BY target").fetchall()
        return [(target, json.loads(arch)) for target, arch in rows]

    @_locked
    def measuring_seconds(self, evaluation: int) -> float:
        """Wall time of every benchmark run of an evaluation, candidate and baseline."""
        return self.db.execute("SELECT COALESCE(SUM(wall_s), 0) FROM samples WHERE evaluation_id=?",
                               (evaluation,)).fetchone()[0]

    @_locked
    def values(self, evaluation: int) -> list[tuple[str, str, float]]:
        """(workload, role, value as the benchmark reported it) of the valid samples."""
        return self.db.execute(
            "SELECT workload, role, value FROM samples WHERE evaluation_id=? AND error='' "
            "AND value IS NOT NULL ORDER BY id", (evaluation,)).fetchall()

    @_locked
    def measurements(self) -> pd.DataFrame:
        """One row per stored sample with the fields stored with it and its evaluation's
        fixed fields; nothing that changes after the sample lands (no status or verdict)."""
        import pandas as pd  # for `export` only: loading it costs every command 0.4 s

        return pd.read_sql_query(
            "SELECT s.id AS sample_id, s.created, e.session_id, s.evaluation_id, e.target,"
            " e.arch_keys, e.config_key, e.config, e.flags, e.strategy, e.phase, e.worker, s.workload,"
            " s.role, s.rep, s.value, s.cost, s.wall_s, s.exit_code, s.error, s.gpu"
            " FROM samples s JOIN evaluations e ON e.id = s.evaluation_id ORDER BY s.id", self.db)

    @_locked
    def gpu_states(self) -> list[dict[str, Any]]:
        """The GPU state recorded with each sample that has one."""
        rows = self.db.execute("SELECT gpu FROM samples WHERE gpu != '{}'").fetchall()
        return [json.loads(r[0]) for r in rows]

    @_locked
    def sessions(self) -> list[tuple[int, float, str, dict[str, object]]]:
        rows = self.db.execute("SELECT id, started, command, environment FROM sessions ORDER BY id")
        return [(r[0], r[1], r[2], json.loads(r[3])) for r in rows]


def open_store(build_dir: Path) -> Store:
    return Store(Workspace(build_dir).store)


@contextmanager
def exclusive_store(build_dir: Path, fresh: bool = False) -> Iterator[Store]:
    """The build folder's store, this process alone on it (`fresh`: emptied first)."""
    workspace = Workspace(build_dir)
    workspace.check_writable()
    lock = FileLock(str(workspace.lock))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        try:
            holder = workspace.lock.read_text(encoding="utf-8").strip()
        except OSError:
            holder = ""
        raise CompileIQError(f"another `tune` is running on {build_dir}{f' ({holder})' if holder else ''}; "
                             "wait for it, or stop it first.") from None
    except OSError as exc:
        raise workspace.unwritable(exc) from None
    try:
        # Who holds the lock, for the message of a second tune (the lock is on the file, not its text).
        workspace.lock.write_text(f"pid {os.getpid()}, since "
                                  f"{time.strftime('%Y-%m-%d %H:%M:%S')}", encoding="utf-8")
        if fresh:
            for suffix in ("", "-wal", "-shm"):
                workspace.store.with_name(workspace.store.name + suffix).unlink(missing_ok=True)
        store = open_store(build_dir)
        try:
            yield store
        finally:
            store.close()
    finally:
        lock.release()


def read_store(path: Path) -> Store:
    """A consistent snapshot of a store, for reading: `report` and `emit --merge` leave the file
    as it is (no migration of an older schema, no WAL files beside a committed store), even
    while a tune writes to it."""
    folder = Path(tempfile.mkdtemp(prefix="compileiq-store-"))
    try:
        # A store no tune has open has no -wal file beside it: read it as immutable, which
        # creates no -wal/-shm files next to it either.
        live = path.with_name(path.name + "-wal").exists()
        source = sqlite3.connect(f"{path.resolve().as_uri()}?{'mode=ro' if live else 'immutable=1'}",
                                 uri=True)
        try:
            copy = sqlite3.connect(folder / path.name)
            source.backup(copy)
            copy.close()
        finally:
            source.close()
    except sqlite3.DatabaseError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise CompileIQError(f"the results store {path} cannot be read ({exc}). Name a results.sqlite "
                             "that `tune` wrote.") from None
    try:
        return Store(folder / path.name, snapshot_of=path)
    except CompileIQError:
        shutil.rmtree(folder, ignore_errors=True)
        raise
