"""Command line: ``flowgrad demo`` runs the shipped example, ``flowgrad rules`` lists derivative
coverage, ``flowgrad bench ...`` runs the benchmark suite from a source checkout."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="flowgrad", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="differentiate a heat-equation simulation and check the gradient")
    demo.add_argument("--n", type=int, default=64)
    demo.add_argument("--steps", type=int, default=200)
    sub.add_parser("rules", help="print the derivative-rule coverage table")
    sub.add_parser("bench", help="run the benchmark suite (python -m benchmarks.run; see benchmarks/README.md)")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        try:
            from benchmarks.run import main as bench_main
        except ImportError:
            print("flowgrad bench runs from a source checkout (the benchmarks/ folder)", file=sys.stderr)
            return 2
        return bench_main(argv[1:])
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run
        return 0 if run(args.n, args.steps) else 1
    if args.command == "rules":
        from .autodiff.rules import coverage
        print(coverage())
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
