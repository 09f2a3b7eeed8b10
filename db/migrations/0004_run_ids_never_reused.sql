-- Run ids are never reused: the runs table keeps the largest id it gave (AUTOINCREMENT), so the id of a dropped run names no later run.

-- SQLite changes a column's definition by rebuilding the table: a new one, the rows copied, the old
-- one dropped, the new one renamed (foreign keys are off while migrations run, and checked before
-- each commits: db/store.py). Every run keeps its id.
CREATE TABLE runs_new (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    uid                TEXT NOT NULL UNIQUE,
    machine_id         TEXT NOT NULL REFERENCES hosts (machine_id),
    host_class         TEXT NOT NULL,
    started_at         TEXT NOT NULL,
    updated_at         TEXT NOT NULL,
    finished_at        TEXT,
    status             TEXT NOT NULL CHECK (status IN ('running', 'complete', 'interrupted', 'failed')),
    "trigger"          TEXT NOT NULL,
    command            TEXT,
    hostname           TEXT NOT NULL,
    pid                INTEGER NOT NULL,
    autoselect_version TEXT NOT NULL,
    meta               TEXT NOT NULL
);
INSERT INTO runs_new (id, uid, machine_id, host_class, started_at, updated_at, finished_at, status, "trigger",
                      command, hostname, pid, autoselect_version, meta)
    SELECT id, uid, machine_id, host_class, started_at, updated_at, finished_at, status, "trigger",
           command, hostname, pid, autoselect_version, meta FROM runs;
DROP TABLE runs;
ALTER TABLE runs_new RENAME TO runs;
CREATE INDEX runs_machine_id ON runs (machine_id);
CREATE INDEX runs_status ON runs (status);
