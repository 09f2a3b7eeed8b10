"""``python -m bench.launch DIR RANK``: one rank of a worker group (see :mod:`bench.launch.worker`)."""

import sys

from bench.launch.worker import main

sys.exit(main(sys.argv[1:]))
