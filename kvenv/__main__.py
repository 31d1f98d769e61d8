import sys

from kvenv.cli import main

sys.exit(main())
