"""Regenerate autoselect's built-in reference data from aiconfigurator-core 0.12.0.

Reads the installed package (``pip install --no-deps aiconfigurator-core==0.12.0``, with pyarrow
from the ``reference-build`` extra: it is located through its metadata, never imported) or an unpacked wheel
(``--from DIR``), never the network, and writes the SQLite file autoselect ships
(``autoselect/reference/data/aiconfigurator-0.12.0.sqlite``, see docs/reference-data.md).

    python scripts/convert_aiconfigurator.py                          # installed package -> the packaged file
    python scripts/convert_aiconfigurator.py --from /tmp/aic          # unzip -q aiconfigurator_core-0.12.0-*.whl -d /tmp/aic
    python scripts/convert_aiconfigurator.py --from /tmp/aic --check  # regenerate in a temp dir, compare with the packaged file
    python scripts/convert_aiconfigurator.py --from /tmp/aic --out /tmp/ref.sqlite --dump /tmp/ref.txt

``--check`` compares the canonical text form (every schema statement and row, in key order):
the SQLite file's own bytes record the library version that wrote it. Exit status: 0 done
(or equal), 1 ``--check`` found a difference, 2 bad input (one ``Error:`` line).
"""

from __future__ import annotations

import argparse
import difflib
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoselect.errors import UserError  # noqa: E402
from autoselect.reference import convert, datafile  # noqa: E402
from autoselect.reference.systems import SYSTEMS  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="convert_aiconfigurator.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--from", dest="from_dir", metavar="DIR",
                   help="an unpacked aiconfigurator_core-0.12.0 wheel (default: the installed package)")
    p.add_argument("--out", type=Path, default=datafile.DEFAULT_PATH, help=f"file to write (default: {datafile.DEFAULT_PATH})")
    p.add_argument("--check", action="store_true",
                   help="write to a temporary file and compare its canonical dump with --out's; write nothing")
    p.add_argument("--dump", type=Path, metavar="FILE", help="also write the canonical text dump to FILE")
    p.add_argument("--systems", metavar="A,B", help="convert only these systems (inspection and tests; the "
                   f"packaged file holds all of {', '.join(SYSTEMS)})")
    args = p.parse_args(argv)
    try:
        systems = None
        if args.systems:
            systems = tuple(s.strip() for s in args.systems.split(",") if s.strip())
            unknown = [s for s in systems if s not in SYSTEMS]
            if unknown or not systems:
                raise UserError(f"--systems {args.systems}: unknown system(s) {', '.join(unknown) or '(none given)'}; "
                                f"known: {', '.join(SYSTEMS)}")
        if args.check and not args.out.is_file():
            raise UserError(f"--check compares with {args.out}, which does not exist")
        if args.from_dir is not None and not Path(args.from_dir).is_dir():
            raise UserError(f"--from {args.from_dir}: no such directory")
        if args.check:
            with tempfile.TemporaryDirectory() as tmp:
                summary = convert.convert(Path(tmp) / datafile.FILENAME, args.from_dir, systems=systems)
                new = _dump(summary.path)
            old = _dump(args.out)
            if args.dump:
                args.dump.write_text(new)
            if new == old:
                print(f"{args.out}: identical to a fresh conversion ({summary.points} points, "
                      f"{summary.collectives} NCCL rows, {summary.sources} tables; {summary.origin})")
                return 0
            diff = list(difflib.unified_diff(old.splitlines(True), new.splitlines(True), str(args.out), "regenerated"))
            sys.stdout.writelines(diff[:60])
            print(f"{args.out} differs from a fresh conversion ({len(diff)} diff lines); rerun without --check")
            return 1
        summary = convert.convert(args.out, args.from_dir, systems=systems)
        if args.dump:
            args.dump.write_text(_dump(summary.path))
    except UserError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {summary.path}: {summary.points} all2all points, {summary.collectives} NCCL rows from "
          f"{summary.sources} tables ({summary.origin})")
    for table, what, rows, reason in summary.skipped:
        print(f"  skipped {rows} {what} of {table}: {reason}")
    return 0


def _dump(path: Path) -> str:
    conn = datafile.connect(path)
    try:
        return datafile.canonical_dump(conn)
    finally:
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
