-- Initial schema: hosts (fingerprints), runs, results (one row per measured point), samples.

-- One row per machine: its newest fingerprint. GPU list, link matrix and versions are JSON text.
CREATE TABLE hosts (
    machine_id       TEXT PRIMARY KEY,
    hostname         TEXT NOT NULL,
    host_class       TEXT NOT NULL,
    device           TEXT NOT NULL CHECK (device IN ('cuda', 'cpu')),
    gpu_name         TEXT,
    gpu_count        INTEGER NOT NULL,
    gpu_arch         TEXT,
    all_nvlinks_up   INTEGER NOT NULL,
    nvlink_peak_gbps REAL,
    fabric           TEXT,
    driver_version   TEXT,
    cuda_version     TEXT,
    cpu_model        TEXT,
    gpus             TEXT NOT NULL,
    nvlink_matrix    TEXT NOT NULL,
    versions         TEXT NOT NULL,
    first_seen       TEXT NOT NULL,
    last_seen        TEXT NOT NULL
);
CREATE INDEX hosts_host_class ON hosts (host_class);

-- One row per benchmark / tune / fleet invocation. pid + hostname identify the writer, so a
-- run left 'running' by a dead process is found and marked 'interrupted'.
CREATE TABLE runs (
    id                 INTEGER PRIMARY KEY,
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
CREATE INDEX runs_machine_id ON runs (machine_id);
CREATE INDEX runs_status ON runs (status);

-- One row per measured point (db/records.py Result); raw samples live in `samples`.
CREATE TABLE results (
    id                 INTEGER PRIMARY KEY,
    result_key         TEXT NOT NULL UNIQUE,
    run_id             INTEGER NOT NULL REFERENCES runs (id),
    machine_id         TEXT NOT NULL REFERENCES hosts (machine_id),
    host_class         TEXT NOT NULL,
    backend            TEXT NOT NULL,
    world_size         INTEGER NOT NULL,
    tokens_per_rank    INTEGER NOT NULL,
    hidden             INTEGER NOT NULL,
    top_k              INTEGER NOT NULL,
    experts            INTEGER NOT NULL,
    dispatch_dtype     TEXT NOT NULL,
    combine_dtype      TEXT NOT NULL,
    routing            TEXT NOT NULL,
    status             TEXT NOT NULL CHECK (status IN ('ok', 'incorrect', 'unavailable', 'error', 'timeout')),
    error              TEXT,
    kind               TEXT NOT NULL CHECK (kind IN ('micro', 'e2e')),
    device             TEXT NOT NULL,
    illegal            INTEGER NOT NULL,
    knobs              TEXT NOT NULL,
    samples            INTEGER NOT NULL,
    latency_us_p50     REAL,
    latency_us_mean    REAL,
    latency_us_min     REAL,
    latency_us_p10     REAL,
    latency_us_p90     REAL,
    latency_us_p99     REAL,
    latency_stdrel     REAL,
    noise_stdrel       REAL,
    dispatch_us_p50    REAL,
    combine_us_p50     REAL,
    bytes_per_rank     INTEGER,
    algbw_gbps         REAL,
    busbw_gbps         REAL,
    noise_target_met   INTEGER,
    versions           TEXT NOT NULL,
    vllm_version       TEXT,
    flashinfer_version TEXT,
    torch_version      TEXT,
    nccl_version       TEXT,
    driver_version     TEXT,
    cuda_version       TEXT,
    created_at         TEXT NOT NULL
);
-- The selector's lookup: one shape (+ dtype, kind) on one host class, optionally one world size.
CREATE INDEX results_shape_host_class ON results
    (hidden, top_k, experts, dispatch_dtype, kind, host_class, world_size, backend, tokens_per_rank);
-- The same lookup pinned to one machine.
CREATE INDEX results_shape_machine ON results
    (machine_id, hidden, top_k, experts, dispatch_dtype, kind, world_size, backend, tokens_per_rank);
CREATE INDEX results_run_id ON results (run_id);
CREATE INDEX results_backend_status ON results (backend, status);

-- The raw per-iteration round-trip latencies of one result, in measurement order.
CREATE TABLE samples (
    result_id  INTEGER NOT NULL REFERENCES results (id) ON DELETE CASCADE,
    idx        INTEGER NOT NULL,
    latency_us REAL NOT NULL,
    PRIMARY KEY (result_id, idx)
) WITHOUT ROWID;
