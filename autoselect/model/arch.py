"""GPU architecture families: the spellings autoselect accepts and the family each names."""

from __future__ import annotations

from autoselect.errors import UserError

#: GPU architecture families autoselect distinguishes.
GPU_ARCHS = ("sm90", "sm100")


class UnknownGpuArch(UserError):
    "The GPU architecture given is not one autoselect knows."


#: Accepted spellings -> family. Compute capabilities 10.x (SM100, SM103) are datacenter
#: Blackwell; 9.0 is Hopper. Consumer Blackwell (SM120) has no NVLink all2all and is refused.
_ARCH_SPELLINGS = {
    "sm90": "sm90", "sm90a": "sm90", "90": "sm90", "9.0": "sm90", "hopper": "sm90",
    "sm100": "sm100", "sm100a": "sm100", "100": "sm100", "10.0": "sm100",
    "sm103": "sm100", "sm103a": "sm100", "103": "sm100", "10.3": "sm100",
    "sm101": "sm100", "101": "sm100", "10.1": "sm100", "sm110": "sm100", "11.0": "sm100",
    "blackwell": "sm100",
}


def normalize_arch(s: str) -> str:
    """Map a GPU architecture spelling to its family, ``"sm90"`` or ``"sm100"``.

    :param s: ``sm90``, ``sm_90``, ``9.0``, ``90``, ``sm100``, ``sm_103``, ``10.3``, ``hopper``,
        ``blackwell`` ...
    :raises UnknownGpuArch: for anything else.
    """
    key = str(s).strip().lower().replace("_", "").replace("compute", "sm")
    if key in _ARCH_SPELLINGS:
        return _ARCH_SPELLINGS[key]
    raise UnknownGpuArch(
        f"unknown GPU architecture {s!r}; use sm90 (Hopper, H100/H200) or sm100 "
        f"(Blackwell, B200/B300/GB200)"
    )
