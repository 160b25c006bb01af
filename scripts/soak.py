#!/usr/bin/env python
"""Run the airflow-tpc soak on demand: ``scripts/soak.py --epochs 60 --seed 7 [--s3]``.

Why a script besides the CI test: the CI size (8 epochs) is a smoke test of the
soak itself; the full size is what finds rare interleavings.  Prints the counts
and exits 1 if the checker found any violation.  Same seed, same history.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.soak.soak import Soak, make_spark, moto_s3, prepare_environment  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=60, help="epochs in the schedule")
    parser.add_argument("--seed", type=int, default=1, help="seed of the whole history")
    parser.add_argument("--s3", action="store_true",
                        help="also write a second target on S3 (moto's server on 127.0.0.1)")
    parser.add_argument("--s3-share", type=float, default=0.25,
                        help="share of the epochs that go to the S3 target (with --s3)")
    parser.add_argument("--workdir", help="where the local target goes (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each epoch")
    args = parser.parse_args(argv)

    prepare_environment()
    # the protocol's own INFO/WARNING lines (rolled forward, aborted...) are expected
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s %(message)s")
    with ExitStack() as stack:
        workdir = args.workdir or stack.enter_context(tempfile.TemporaryDirectory(
            prefix="tpc-soak-"))
        s3_target, s3_options = (stack.enter_context(moto_s3()) if args.s3 else (None, None))
        spark = make_spark()
        stack.callback(spark.stop)
        # the injected task failures make Spark log a stack trace each; they are expected
        spark.sparkContext.setLogLevel("FATAL")
        soak = Soak(spark, workdir, epochs=args.epochs, seed=args.seed, s3_target=s3_target,
                    s3_options=s3_options, s3_share=args.s3_share,
                    echo=print if args.verbose else None)
        result = soak.run()
        print(f"soak seed={args.seed} epochs={args.epochs} s3={args.s3} "
              f"({result.elapsed_s:.0f} s)")
        if args.json:
            print(json.dumps(result.counts.as_dict(), indent=1))
        else:
            print(result.counts.render())
        for a in result.anomalies:
            print(f"ANOMALY: {a}")
        for v in result.violations:
            print(f"VIOLATION: {v}")
        return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())
