"""Replay recorded NVML answers (tests/fixtures/nvml/*.json) through a pynvml-shaped object.

The fixtures are written by tests/fixtures/nvml/record_nvml.py. Every call the recorder
made returns what was recorded, or raises the recorded NVML error as the real pynvml does
(``pynvml.NVMLError(code)`` becomes ``NVMLError_NotSupported`` etc.).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pynvml

from support.paths import FIXTURES

NVML_FIXTURES = FIXTURES / "nvml"

_ERROR_CODES = {
    "NotSupported": pynvml.NVML_ERROR_NOT_SUPPORTED,
    "InvalidArgument": pynvml.NVML_ERROR_INVALID_ARGUMENT,
    "LibraryNotFound": pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
    "DriverNotLoaded": pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    "Unknown": pynvml.NVML_ERROR_UNKNOWN,
}


def load(name: str) -> dict:
    """A fixture by file stem, e.g. ``"hgx_h200_8gpu"``."""
    return json.loads((NVML_FIXTURES / f"{name}.json").read_text())


def _answer(value):
    if isinstance(value, dict) and "error" in value:
        raise pynvml.NVMLError(_ERROR_CODES.get(value["error"], pynvml.NVML_ERROR_UNKNOWN))
    return value


class ReplayNvml:
    """A stand-in for the ``pynvml`` module that answers from a recording.

    Constants and structure types (``NVML_NVLINK_MAX_LINKS``, ``c_nvmlGpuFabricInfoV_t``,
    ``NVMLError_NotSupported`` ...) come from the real pynvml.
    """

    def __init__(self, recording: dict, *, init_error: str | None = None):
        self.rec = recording
        self.init_error = init_error
        self.calls: list[str] = []
        self.initialised = False

    def __getattr__(self, name):
        return getattr(pynvml, name)

    def nvmlInit(self):
        self.calls.append("nvmlInit")
        if self.init_error:
            raise pynvml.NVMLError(_ERROR_CODES[self.init_error])
        self.initialised = True

    def nvmlShutdown(self):
        self.calls.append("nvmlShutdown")
        self.initialised = False

    def _dev(self, handle):
        assert self.initialised, "NVML used before nvmlInit or after nvmlShutdown"
        return self.rec["devices"][handle]

    def nvmlDeviceGetCount(self):
        return len(self.rec["devices"])

    def nvmlDeviceGetHandleByIndex(self, i):
        self._dev(i)
        return i

    def nvmlDeviceGetName(self, h):
        return _answer(self._dev(h)["name"])

    def nvmlDeviceGetUUID(self, h):
        return _answer(self._dev(h)["uuid"])

    def nvmlDeviceGetMemoryInfo(self, h):
        total = self._dev(h)["memory_total"]
        return SimpleNamespace(total=total, free=total, used=0)

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return tuple(self._dev(h)["cc"])

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self._dev(h)["pci_bus_id"])

    def _link(self, h, link):
        links = self._dev(h)["nvlinks"]
        if link >= len(links):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _answer(links[link])

    def nvmlDeviceGetNvLinkState(self, h, link):
        return self._link(h, link)["state"]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        return SimpleNamespace(busId=_answer(self._link(h, link)["remote_pci_bus_id"]))

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        return _answer(self._link(h, link)["remote_type"])

    def nvmlDeviceGetGpuFabricInfoV(self, h, info):
        f = _answer(self._dev(h)["fabric"])
        info.state = f["state"]
        info.status = f["status"]
        info.cliqueId = f["cliqueId"]
        for i, b in enumerate(bytes.fromhex(f["clusterUuid"])):
            info.clusterUuid[i] = b
        return pynvml.NVML_SUCCESS

    def nvmlSystemGetDriverVersion(self):
        return _answer(self.rec["driver_version"])

    def nvmlSystemGetCudaDriverVersion(self):
        return _answer(self.rec["cuda_driver_version"])
