"""Fixtures the launch tests share."""

from __future__ import annotations

import pytest

from support.fleet import h200_host

import autoselect.selector.pipeline as pipeline


@pytest.fixture
def on_fleet_node(monkeypatch):
    """This machine is node gpu-a of the fleet's H200 class."""
    node = h200_host("gpu-a")
    monkeypatch.setattr("autoselect.launch.platform.local_host", lambda: node)
    monkeypatch.setattr(pipeline, "fingerprint", lambda: node)
    return node
