"""``python -m airflow_tpc``: the airflow-tpc command line."""

import sys

from .cli import main

sys.exit(main())
