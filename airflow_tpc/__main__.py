"""``python -m airflow_tpc``: the airflow-tpc command line."""

import sys

from .cli.commands import main

sys.exit(main())
