"""``python -m safeact``: the ``safeact`` command line."""

from safeact._cli import main

raise SystemExit(main())
