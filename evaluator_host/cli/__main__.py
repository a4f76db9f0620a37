"""``python -m evaluator_host.cli``."""

import sys

from evaluator_host.cli.main import main

sys.exit(main())
