import sys

from r2med_core.cli import main

sys.exit(main())
