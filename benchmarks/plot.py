"""Plot steps per second against environments / devices from benchmark JSON lines.

    python benchmarks/anakin_throughput.py --out results.jsonl
    python benchmarks/plot.py results.jsonl --out sps.png [--x num_envs] [--y sps]

One series per configuration family (``ppo-4``, ``ppo-64`` -> ``ppo``); see
:func:`podracer.runs.plotting.plot_benchmark`.
"""

import argparse
import sys

from podracer.runs.plotting import plot_benchmark


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="JSONL files written by benchmarks/*.py")
    parser.add_argument("--out", default="benchmark.png", help="the PNG file to write")
    parser.add_argument("--x", default=None, help="x key (default: num_envs, devices, ... given)")
    parser.add_argument("--y", default="sps", help="y key")
    args = parser.parse_args(argv)
    print(plot_benchmark(args.files, args.out, x=args.x, y=args.y))
    return 0


if __name__ == "__main__":
    sys.exit(main())
