"""``python -m bench.launch DIR RANK``: one rank of a worker group (see :mod:`bench.launch.worker`);
``python -m bench.launch --zygote``: the fork server of a caller's groups (:mod:`bench.launch.zygote`)."""

import sys

if sys.argv[1:] == ["--zygote"]:
    from bench.launch.zygote import main

    sys.exit(main())
else:
    from bench.launch.worker import main

    sys.exit(main(sys.argv[1:]))
