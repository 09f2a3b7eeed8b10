-- Tuned configurations: the backend and knobs `autoselect tune` found best, with the measured gain.

-- One row per finished tune. `recommend` prints the knobs (env vars and vllm serve flags) of the
-- newest row with status 'gain' for its host class, shape, world size and backend.
CREATE TABLE tuned_configs (
    id                 INTEGER PRIMARY KEY,
    run_id             INTEGER REFERENCES runs (id),
    host_class         TEXT NOT NULL,
    machine_id         TEXT NOT NULL,
    created_at         TEXT NOT NULL,
    hidden             INTEGER NOT NULL,
    top_k              INTEGER NOT NULL,
    experts            INTEGER NOT NULL,
    dispatch_dtype     TEXT NOT NULL,
    world_size         INTEGER NOT NULL,
    device             TEXT NOT NULL CHECK (device IN ('cuda', 'cpu')),
    workload           TEXT NOT NULL,
    backend            TEXT NOT NULL,
    knobs              TEXT NOT NULL,
    env                TEXT NOT NULL,
    flags              TEXT NOT NULL,
    status             TEXT NOT NULL
        CHECK (status IN ('gain', 'no_gain', 'no_legal_knobs', 'budget', 'not_searched')),
    gain               REAL,
    gain_halfwidth     REAL,
    tuned_latency_us   REAL,
    untuned_latency_us REAL,
    stop               TEXT NOT NULL,
    study              TEXT NOT NULL,
    versions           TEXT NOT NULL
);
CREATE INDEX tuned_configs_lookup
    ON tuned_configs (host_class, hidden, top_k, experts, dispatch_dtype, world_size, backend);
