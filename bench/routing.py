"""Routing of a benchmark point: which experts each token goes to (``routing=``).

- ``uniform``: DeepEP-style, ``top_k`` distinct experts per token, every expert equally
  likely (top-k of i.i.d. uniform scores).
- ``zipf`` or ``zipf:S``: expert popularity follows Zipf's law with exponent ``S``
  (default 1.2; a decimal in (0, 8]) over a seeded permutation of the experts; ``top_k``
  distinct experts per token drawn without replacement.
- a file (``file:PATH`` or just ``PATH`` ending in ``.json``, ``.npy`` or ``.pt``): an
  integer array ``[rows, top_k]`` of expert ids (JSON: a list of lists), ids in
  ``[0, experts)`` and distinct within a row. Global token ``g`` uses row ``g % rows``, so
  a file with ``world_size * tokens_per_rank`` rows gives every token its own routing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from autoselect.errors import UserError
from autoselect.options import parse_number

#: Default Zipf exponent for ``routing="zipf"``.
DEFAULT_ZIPF_EXPONENT = 1.2
#: The largest Zipf exponent: far more skew than any measured MoE router (fits give about 0.5-2),
#: and small enough that every expert keeps a non-zero float32 probability (rank ``65536 ** -8``
#: is about 3e-39), so ``top_k`` distinct experts can always be drawn. ``zipf:inf`` would leave
#: one expert with any probability at all.
MAX_ZIPF_EXPONENT = 8.0


class BadRouting(UserError):
    "The routing spec or routing file cannot be used."


@dataclass(frozen=True)
class RoutingSpec:
    """A parsed ``routing`` string: ``kind`` is uniform, zipf or file."""

    kind: str
    exponent: float = DEFAULT_ZIPF_EXPONENT
    path: str | None = None

    @property
    def label(self) -> str:
        """How the routing is stored in result rows (``uniform``, ``zipf:1.2``, ``file:NAME``)."""
        if self.kind == "zipf":
            return f"zipf:{self.exponent:g}"
        if self.kind == "file":
            return f"file:{Path(self.path).name}"
        return "uniform"


def parse_routing(routing: str) -> RoutingSpec:
    """Parse ``uniform``, ``zipf``, ``zipf:S``, ``file:PATH`` or a ``.json/.npy/.pt`` path."""
    text = (routing or "").strip()
    if text == "uniform":
        return RoutingSpec("uniform")
    if text == "zipf" or text.startswith("zipf:"):
        exponent = DEFAULT_ZIPF_EXPONENT
        if ":" in text:
            try:  # the decimal grammar of every numeric option: finite, ASCII digits
                exponent = parse_number(text.split(":", 1)[1], what=f"routing {routing!r}: the Zipf exponent",
                                        maximum=MAX_ZIPF_EXPONENT)
            except UserError as e:
                raise BadRouting(f"{e}; use e.g. zipf:1.2") from None
            if not exponent > 0:
                raise BadRouting(f"routing {routing!r}: the Zipf exponent must be > 0; use e.g. zipf:1.2")
        return RoutingSpec("zipf", exponent=exponent)
    path = text[5:] if text.startswith("file:") else text
    if path.endswith((".json", ".npy", ".pt")) or text.startswith("file:"):
        if not Path(path).is_file():
            raise BadRouting(f"routing file {path!r} does not exist; pass an existing .json, .npy or .pt file")
        return RoutingSpec("file", path=str(Path(path).resolve()))
    raise BadRouting(
        f"unknown routing {routing!r}; use uniform, zipf, zipf:S, or a .json/.npy/.pt file of expert ids"
    )


def load_routing_file(path: str, top_k: int, experts: int):
    """Load and validate a routing file: ``int64 [rows, top_k]`` of distinct expert ids per row."""
    import torch

    p = Path(path)
    try:
        if p.suffix == ".json":
            data = torch.tensor(json.loads(p.read_text()), dtype=torch.int64)
        elif p.suffix == ".npy":
            import numpy as np

            data = torch.from_numpy(np.load(p, allow_pickle=False).astype("int64"))
        elif p.suffix == ".pt":
            data = torch.load(p, weights_only=True)
            if not isinstance(data, torch.Tensor):
                raise BadRouting(f"routing file {path}: expected one tensor, found {type(data).__name__}")
            data = data.to(torch.int64)
        else:
            raise BadRouting(f"routing file {path}: unknown suffix; use .json, .npy or .pt")
    except BadRouting:
        raise
    except Exception as e:  # a malformed file is the user's input
        raise BadRouting(f"routing file {path} could not be read ({type(e).__name__}: {e}); "
                         "write an integer array [tokens, top_k]") from None
    if data.dim() != 2 or data.shape[0] < 1 or data.shape[1] != top_k:
        raise BadRouting(f"routing file {path} has shape {list(data.shape)}; expected [tokens, {top_k}] (top_k={top_k})")
    if int(data.min()) < 0 or int(data.max()) >= experts:
        raise BadRouting(f"routing file {path} has expert ids outside [0, {experts}); fix the ids or pass --experts")
    srt = data.sort(dim=1).values
    dup = (srt[:, 1:] == srt[:, :-1]).any(dim=1)
    if bool(dup.any()):
        row = int(dup.nonzero()[0])
        raise BadRouting(f"routing file {path}: row {row} repeats an expert ({data[row].tolist()}); "
                         "each token needs top_k distinct experts")
    return data
