"""What the tests share besides fixtures: fixture databases, replayed NVML, stand-in kernels,
the hostile-input promise. Importable as ``support.<module>`` because pyproject's
``[tool.pytest.ini_options] pythonpath`` puts tests/ on sys.path (see tests/README.md)."""
