"""``podracer eval``: a saved run's checkpoint played for fresh episodes (an elastic run's best
member, :mod:`podracer.experiments.elastic`)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from podracer.cli.parse import CLIError
from podracer.util.validation import ArgumentParser


def _parser() -> ArgumentParser:
    parser = ArgumentParser(prog="podracer eval", description="Evaluate a saved run's checkpoint.")
    parser.add_argument("run_dir", help="a run directory (podracer train --run-dir)")
    parser.add_argument("--episodes", type=int, help="episodes (per seed; 10, or 1 with --video)")
    parser.add_argument("--stochastic", action="store_true", help="sample actions (not greedy)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--step", type=int, help="the checkpoint to evaluate (the latest)")
    which.add_argument(
        "--best",
        action="store_true",
        help="the checkpoint of the best evaluation return (with --video and several members: "
        "the best member)",
    )
    parser.add_argument(
        "--video",
        nargs="?",
        const="",
        metavar="PATH",
        help="write the episodes as a video instead (.mp4, or .gif; default "
        "RUN_DIR/videos/eval-update<U>.mp4; needs pip install 'podracer[video]')",
    )
    parser.add_argument(
        "--member", type=int, help="with --video: the member of a population or sweep (0)"
    )
    parser.add_argument(
        "--max-steps",
        type=int,
        default=10_000,
        help="with --video: the steps of an episode shown at most (10000)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check the flags and the run directory's config, then exit: nothing evaluated",
    )
    return parser


def evaluate(argv: Sequence[str]) -> dict:
    """``podracer eval RUN_DIR [--episodes N] [--stochastic] [--step S | --best]
    [--video [PATH] [--member K]] [--dry-run]``; prints the result as one JSON line."""
    args = _parser().parse_args(list(argv))
    if args.episodes is None:
        args.episodes = 1 if args.video is not None else 10
    if args.member is not None and args.video is None:
        raise CLIError("--member is allowed with --video only")
    if args.max_steps < 1:
        raise CLIError(f"--max-steps={args.max_steps} is not allowed: it must be >= 1")
    if args.episodes < 1:
        raise CLIError(f"--episodes={args.episodes} is not allowed: it must be >= 1")
    if args.dry_run:
        from podracer.runs import dry_run_saved

        return dry_run_saved("eval", args.run_dir, step=args.step)
    from podracer.experiments import elastic
    from podracer.runs import evaluate_run

    greedy = not args.stochastic
    if args.video is not None:
        from podracer.runs import video_of_run

        result = video_of_run(
            args.run_dir,
            args.video or None,
            episodes=args.episodes,
            member=args.member,
            best=args.best,
            step=args.step,
            greedy=greedy,
            max_steps=args.max_steps,
        )
    elif elastic.is_elastic_run(args.run_dir):  # the best member the leaderboard kept
        result = elastic.evaluate_best(args.run_dir, episodes=args.episodes, greedy=greedy)
    else:
        result = evaluate_run(
            args.run_dir, episodes=args.episodes, greedy=greedy, step=args.step, best=args.best
        )
    print(json.dumps(result), flush=True)
    return result
