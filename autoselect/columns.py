"""Printing rows of cells as aligned text columns: the one table printer of every text answer.

``recommend``'s candidate table, ``bench``'s nccl-tests-like result rows and ``confirm``'s stored
rows all print through :func:`aligned`, so a column is as wide as its widest cell everywhere (a
cell longer than a fixed column used to shift the rest of its row), numbers are right-aligned,
and no line ends in blanks. Stdlib only.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence


def aligned(rows: Sequence[Sequence[str]], *, right: Collection[int] = (), min_widths: Sequence[int] = (),
            sep: str = "  ") -> list[str]:
    """One line per row: cell ``i`` padded to the widest cell of column ``i`` (at least
    ``min_widths[i]``), right-aligned where ``i`` is in ``right``, joined by ``sep``, trailing
    blanks stripped. Rows shorter than the longest are padded with empty cells."""
    if not rows:
        return []
    n = max(len(r) for r in rows)
    cells = [list(r) + [""] * (n - len(r)) for r in rows]
    widths = [max([len(r[i]) for r in cells] + [min_widths[i] if i < len(min_widths) else 0]) for i in range(n)]
    return [sep.join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in cells]
