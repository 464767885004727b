"""``podracer sweep``: seeds and hyper-parameters of one run's command line
(:mod:`podracer.experiments.sweep`), read from its one parse
(:class:`~podracer.cli.parse.SweepArgs`)."""

from __future__ import annotations

import json
import sys

from podracer.cli.parse import CLIError, SweepArgs, process_setup, run_spec
from podracer.cli.train import check_run_dir, print_plan

SWEEP_HELP = """usage: podracer sweep [TRAIN FLAGS] [--seeds N] [--sweep.FIELD V1,V2,...]

Every combination of the swept values, each with N seeds (--seeds, default 1). On a loop that
runs members as one program (--arch anakin) the whole grid is one vmapped program
(hyper-parameters are traced values, one compile); on the others (--arch sebulba) the members
run one after another. Prints the table over seeds (mean, median, IQM and its bootstrap 95% CI)
on stderr and one JSON line per combination on stdout; the run directory gets config.json,
metrics.jsonl (one curve per member) and results.json (podracer plot draws one curve per
combination from it).

sweepable fields: {fields}
"""


def print_help() -> None:
    """``podracer sweep --help``: the usage and every agent's sweepable fields."""
    from podracer import agents
    from podracer.experiments import sweep as sweeps

    fields = "; ".join(
        f"{name}: {', '.join(sweeps.sweepable(spec))}" for name, spec in agents.AGENTS.items()
    )
    print(SWEEP_HELP.format(fields=fields), end="")


def sweep(args: SweepArgs) -> list[dict]:
    """``podracer sweep``: the grid of ``args`` checked, planned (``--dry-run``) or run; the
    table on stderr and one JSON line per combination."""
    from podracer import runs
    from podracer.experiments import sweep as sweeps
    from podracer.util import stats

    train = args.train
    grid = sweeps.Grid(values=args.values, seeds=args.seeds)
    check_run_dir(train)
    spec, selectors = run_spec(train)
    if spec.population is not None:
        raise CLIError("--population is not allowed in a sweep: use podracer train --population")
    if selectors.resume or selectors.resume_step is not None:
        raise CLIError(
            "--resume is not allowed in a sweep: a sweep always starts afresh; resume one of "
            "its runs with podracer train --resume DIR"
        )
    sweeps.check_grid(spec.agent_spec, spec.agent_config, grid)
    run_dir = selectors.run_dir or runs.default_run_dir(spec, kind="sweep")
    values = {k: list(v) for k, v in grid.values.items()}
    if args.dry:
        process_setup(train)
        print_plan(
            runs.plan(
                sweeps.first_system(spec, grid), spec, run_dir, sweep=values, seeds=grid.seeds
            )
        )
        return []
    runs.check_processes_agree(spec, run_dir, sweep=values, seeds=grid.seeds)
    combos = sweeps.run_sweep(spec, grid, run_dir, console=not selectors.quiet)
    columns = [*grid.values, "n", "mean", "median", "iqm", "iqm_ci_low", "iqm_ci_high"]
    print(stats.format_table(combos, columns), file=sys.stderr)
    for row in combos:
        print(json.dumps(row), flush=True)
    return combos
