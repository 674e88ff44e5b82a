"""`python -m memwall`: the same command line as `memwall`."""

import sys

from .cli import main

sys.exit(main())
