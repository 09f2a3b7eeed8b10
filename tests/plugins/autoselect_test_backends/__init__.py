"""Faulty adapters for the harness's tests, registered like any third-party adapter.

``tests/plugins`` holds a ``*.dist-info`` with an ``entry_points.txt`` in the
``autoselect.backends`` group; putting the directory on ``sys.path`` (and on ``PYTHONPATH``
for the workers) makes ``importlib.metadata`` find them.
"""
