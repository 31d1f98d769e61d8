"""`python -m kvenv`: run the command line, exactly as the `kvenv` script does."""

import sys

from kvenv.cli import main

sys.exit(main())
