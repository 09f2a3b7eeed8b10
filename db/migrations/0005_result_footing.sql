-- Each result's footing: how it was timed and why, vLLM's calls or the fused variant, equal or unequal DP sizes, the adapter or vLLM's own path.

-- graph (CUDA-graph replay), eager (CUDA events around launched round trips), cpu (gloo wall clock);
-- NULL for a point that was not timed.
ALTER TABLE results ADD COLUMN timing TEXT CHECK (timing IS NULL OR timing IN ('graph', 'eager', 'cpu'));
-- Why an eager point was not replayed from a CUDA graph (vLLM runs that step eagerly, or the adapter cannot be captured).
ALTER TABLE results ADD COLUMN timing_note TEXT;
-- vLLM's default and its variant: grouped (one collective per tensor, as vLLM calls them) or fused (all in one);
-- NULL for a backend whose kernels move the payload themselves.
ALTER TABLE results ADD COLUMN calls TEXT CHECK (calls IS NULL OR calls IN ('grouped', 'fused'));
-- vLLM's call path for equal token counts per DP rank (padded) or unequal ones (eager steps).
ALTER TABLE results ADD COLUMN dp_sizes TEXT NOT NULL DEFAULT 'equal' CHECK (dp_sizes IN ('equal', 'unequal'));
-- The benchmark's adapter, or vLLM's own prepare / finalize objects (bench --via vllm).
ALTER TABLE results ADD COLUMN via TEXT NOT NULL DEFAULT 'adapter' CHECK (via IN ('adapter', 'vllm'));
-- Before this schema the allgather_reducescatter adapter packed every tensor into one all_gather.
UPDATE results SET calls = 'fused' WHERE backend = 'allgather_reducescatter';
