"""Ship the job-side code to a cluster: a zip for ``spark-submit --py-files``.

The job needs the core and ``airflow_tpc.spark`` but must not need Airflow (a
Spark cluster has no Airflow installed), so ``airflow_tpc/airflow`` — the
operators — is left out, and so are caches.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

EXCLUDED_SUBPACKAGES = ("airflow",)


def py_files_zip(path: str | os.PathLike[str]) -> str:
    """Write the airflow_tpc package (without ``airflow_tpc/airflow``) to ``path``; return it.

    Entries get a fixed timestamp, so the same code always gives the same bytes
    (a cluster-side cache keyed on the file's hash stays valid).
    """
    package = Path(__file__).resolve().parent.parent
    out = Path(path)
    if out.is_dir():
        out = out / "airflow_tpc.zip"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in sorted(package.rglob("*")):
            rel = file.relative_to(package)
            if file.is_dir() or rel.parts[0] in EXCLUDED_SUBPACKAGES \
                    or "__pycache__" in rel.parts or file.suffix in (".pyc", ".pyo"):
                continue
            if file.suffix not in (".py", ".typed", ".json"):
                continue
            info = zipfile.ZipInfo(str(Path("airflow_tpc") / rel), date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, file.read_bytes())
    os.replace(tmp, out)
    return str(out)
