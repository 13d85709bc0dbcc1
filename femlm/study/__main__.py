"""`python -m femlm.study`: the evidence study (see femlm.study.driver)."""

import sys

from femlm.study.driver import main

sys.exit(main())
