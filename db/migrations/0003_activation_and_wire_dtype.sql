-- Results and tuned configurations are filed under the model's activation_dtype; results record the wire_dtype their payload carried.

-- The column held the model's activation dtype all along (docs/terms.md): the name says so
-- now. RENAME COLUMN (SQLite 3.25+) rewrites the indexes that name it.
ALTER TABLE results RENAME COLUMN dispatch_dtype TO activation_dtype;
ALTER TABLE tuned_configs RENAME COLUMN dispatch_dtype TO activation_dtype;

-- What the benchmark payload carried: the backend's wire dtype for that activation dtype on
-- the run's target vLLM (autoselect/rules/wire.py). NULL where it was not recorded: rows
-- written before this migration, and end-to-end (e2e) rows, where vLLM itself moved the data.
ALTER TABLE results ADD COLUMN wire_dtype TEXT;
