"""The soak runs in the Spark suite's session: one JVM per test session.

pytest runs every test folder in one process, and a second SparkSession with other
settings would clash with the first (``getOrCreate`` returns whichever came first),
so the soak reuses the very fixture of ``tests/spark`` instead of defining its own.
The S3 fixtures (moto's server on 127.0.0.1) come from ``tests/conftest.py``.
"""

from tests.spark.conftest import spark  # noqa: F401 - the shared session-scoped fixture
