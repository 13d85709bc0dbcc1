"""`python -m femlm.experiment`: see femlm.experiment.cli."""

import sys

from femlm.experiment.cli import main

sys.exit(main())
