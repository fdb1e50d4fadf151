"""``python -m tests.functional.chaos``: the command line of a chaos run
(``make chaos``, doc/chaos.rst)."""

from __future__ import annotations

import sys

from tests.functional.chaos.runner import main

sys.exit(main())
