"""The benchmark harness: workloads, launch, backend adapters and measurement."""
