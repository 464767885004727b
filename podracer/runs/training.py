"""Train a run: build the system from its spec; log, checkpoint and evaluate it through the
loop's hooks; stop cleanly on Ctrl-C; restore or evaluate a saved run."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from typing import Any

import jax
import numpy as np

from podracer import loops
from podracer.errors import ConfigError
from podracer.loops.common import Diverged, check_finite, params_finite
from podracer.runs.checkpoint import Checkpointer, CheckpointError
from podracer.runs.logging import make_logger
from podracer.runs.rundir import VIDEO_DIR
from podracer.runs.spec import RunSpec, load_spec, save_spec


class _Hooks(loops.RunHooks):
    """Periodic evaluation and checkpoints between calls (:class:`podracer.loops.RunHooks`)."""

    def __init__(
        self, spec: RunSpec, checkpointer, logger, evaluate, steps_per_update, start, videos=None
    ):
        options = spec.options
        self.options = options
        self.videos = videos  # a VideoRecorder (--video-interval), or None
        intervals = [
            i
            for i in (options.checkpoint_interval, options.eval_interval, options.video_interval)
            if i
        ]
        self.interval = math.gcd(*intervals) if intervals else 0
        self.checkpointer = checkpointer
        self.logger = logger
        self.evaluate = evaluate  # (state, updates) -> record or None
        self.steps_per_update = steps_per_update
        self.meta_base = {"arch": spec.arch, "agent": spec.agent, "env": spec.env}
        self.start = start
        self.session_start = time.time()
        self.last_saved = None
        self.saved_on_interrupt = None  # the updates of the state saved on Ctrl-C, if any

    def _meta(self, updates: int) -> dict[str, Any]:
        return {
            **self.meta_base,
            "updates": updates,
            "step": updates * self.steps_per_update,
            "saved_at": time.time(),
            "session_s": time.time() - self.session_start,
        }

    def after_call(self, state, updates: int, last: bool) -> None:
        options = self.options
        eval_return = None
        if options.eval_interval and (last or updates % options.eval_interval == 0):
            returns = self.evaluate(state, updates)
            record = _eval_record(returns, updates, self.steps_per_update)
            self.logger.log(record)
            eval_return = record["eval_return"]
        if self.videos is not None and updates % options.video_interval == 0:
            self.videos.submit(state, updates)  # before the save: the state is not donated yet
        if last or (options.checkpoint_interval and updates % options.checkpoint_interval == 0):
            self.save(state, updates, eval_return)

    def after_metrics(self, metrics, first_update: int) -> None:
        if self.options.check_finite:
            try:
                check_finite(metrics, first_update)
            except Diverged as error:
                raise Diverged(f"{error}{self._nothing_saved()}") from None

    def _nothing_saved(self) -> str:
        latest = self.checkpointer.latest_step()
        kept = "no checkpoint" if latest is None else f"the latest checkpoint is of update {latest}"
        return (
            f"; nothing after it is saved ({kept}). Lower the learning rate, or pass "
            "--no-check-finite to let a run go on with non-finite values"
        )

    def save(self, state, updates: int, eval_return=None) -> None:
        if updates == self.start:
            return  # nothing new since the checkpoint this run started from
        if self.options.check_finite and not params_finite(state.learner.params):
            raise Diverged(
                f"the run diverged: the parameters after update {updates} are not finite"
                f"{self._nothing_saved()}"
            )
        with signals_held():
            self.checkpointer.save(updates, state, self._meta(updates), eval_return)
        self.last_saved = updates

    def interrupted(self, state, updates: int) -> None:
        self.save(state, updates)
        if updates in self.checkpointer.steps():  # just saved, or saved before (the same state)
            self.saved_on_interrupt = updates

    @contextlib.contextmanager
    def reporting_interrupts(self):
        """A Ctrl-C inside becomes :class:`Interrupted`, saying what was saved."""
        try:
            yield
        except KeyboardInterrupt as stop:
            raise Interrupted(self.saved_on_interrupt, self.checkpointer.latest_step()) from stop


@contextlib.contextmanager
def signals_held():
    """Ctrl-C (SIGINT) and SIGTERM that arrive inside are acted on when it ends: a checkpoint is
    never abandoned half-written by its own process (orbax then found the unfinished step in
    its way when the interrupted run saved that state, and failed). Main thread only (where
    Python runs signal handlers); a signal whose handler is not Python's is left alone."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(signum)
        if callable(handler):
            previous[signum] = handler
            signal.signal(signum, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if pending:
            previous[pending[0]](pending[0], None)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a run.

    ``saved``: the updates of the checkpoint that holds the state the run had reached (None
    when it could not be saved: interrupted before the first update, or as a step returned, its
    input state donated); ``latest``: the run's latest checkpoint (None: there is none).
    """

    def __init__(self, saved: int | None, latest: int | None):
        super().__init__(saved, latest)
        self.saved = saved
        self.latest = latest


def _eval_record(returns: np.ndarray, updates: int, steps_per_update: int) -> dict[str, Any]:
    """``returns [members, episodes]`` as an ``"eval"`` record."""
    return {
        "kind": "eval",
        "step": updates * steps_per_update,
        "updates": updates,
        "eval_return": float(returns.mean()),
        "eval_return_std": float(returns.std()),
        "eval_returns": [float(r) for r in returns.mean(axis=1)],
        "episodes": int(returns.size),
    }


def run_logger(run_dir: str, spec: RunSpec, *, console: bool = True):
    """The logger of a run directory, with the backends ``spec.options`` asks for."""
    return make_logger(
        run_dir,
        spec.total_timesteps,
        console=console,
        tensorboard=spec.options.tensorboard,
        wandb=spec.options.wandb,
        wandb_online=spec.options.wandb_online,
        config=spec.to_dict(),
    )


def build_system(spec: RunSpec, devices=None) -> loops.System:
    """The system of a spec, through the loop registry: a population's when
    ``spec.population`` is set; its environments have ``spec.env_options``."""
    loop = loops.get(spec.arch)
    agent_spec = spec.agent_spec
    if spec.population is not None:
        from podracer import population

        return population.build_system(
            loop,
            spec.env,
            agent_spec,
            spec.agent_config,
            spec.arch_config,
            spec.population,
            total_timesteps=spec.total_timesteps,
            seed=spec.seed,
            devices=devices,
            env_options=spec.env_options,
        )
    return loops.build(
        loop,
        spec.env,
        spec.agent_config,
        spec.arch_config,
        agent_spec=agent_spec,
        total_timesteps=spec.total_timesteps,
        seed=spec.seed,
        devices=devices,
        env_options=spec.env_options,
    )


def train(
    spec: RunSpec,
    run_dir: str,
    *,
    resume: bool = False,
    resume_step: int | None = None,
    console: bool = True,
    devices=None,
) -> dict[str, Any]:
    """Runs (or resumes) ``spec`` in ``run_dir``; returns the summary (the final JSON line).

    The system is built and its initial state made (so a bad config, environment id or size
    is reported) before anything is written into ``run_dir``.
    """
    system = build_system(spec, devices)
    state = system.init(spec.seed)
    if spec.options.video_interval:  # a family that cannot draw, or no video extra: one line
        from podracer.runs.video import check_renders

        check_renders(system, spec)
    if not resume:
        save_spec(run_dir, spec)
    checkpointer = Checkpointer(run_dir, keep=spec.options.keep_checkpoints)
    logger = None
    videos = None
    try:
        start = 0
        if resume:  # the checkpoint is checked before anything is added to the run directory
            state, meta = checkpointer.restore(state, resume_step)
            start = int(meta["updates"])
            steps_per_update = system.recipe.steps_per_update
            if start >= max(1, spec.total_timesteps // steps_per_update):
                raise ConfigError(
                    f"--total-timesteps={spec.total_timesteps} is not allowed: the run in "
                    f"{run_dir} has already done {start} updates ({start * steps_per_update} "
                    "steps); give more to continue it"
                )
            if spec.total_timesteps != load_spec(run_dir).total_timesteps:
                save_spec(run_dir, spec)  # the run's new length
        logger = run_logger(run_dir, spec, console=console)
        options = spec.options
        evaluate = None
        if options.eval_interval:
            evaluate = system.evaluator(
                seed=spec.seed, episodes=options.eval_episodes, greedy=options.eval_greedy
            )
        steps_per_update = system.recipe.steps_per_update
        if options.video_interval:
            from podracer.runs.video import VideoRecorder

            videos = VideoRecorder(system, spec, run_dir, logger, steps_per_update)
        hooks = _Hooks(spec, checkpointer, logger, evaluate, steps_per_update, start, videos)
        with hooks.reporting_interrupts():
            result = system.run(
                state, seed=spec.seed, start_update=start, hooks=hooks, progress=logger
            )
        if videos is not None:
            videos.close()
    finally:
        if videos is not None:
            videos.stop()
        if logger is not None:
            logger.close()
        checkpointer.close()
    summary = result.summary
    if spec.population is not None:
        from podracer.population.ensemble import final_scores

        summary.update(population=spec.population.size, **final_scores(result.events))
    summary.update(agent=spec.agent, run_dir=run_dir)
    return summary


def restore_run(spec: RunSpec, run_dir: str, *, step: int | None = None, best: bool = False):
    """``(system, state, meta)``: the system of ``spec`` and the state of one of its checkpoints
    in ``run_dir`` (default: the latest; ``step``; ``best``: the one of the largest evaluation
    return during training), what ``podracer eval`` and ``podracer backtest`` start from."""
    with Checkpointer(run_dir, keep=spec.options.keep_checkpoints) as checkpointer:
        if best:
            if step is not None:
                raise ConfigError("--best and --step are not allowed together: give one")
            step = checkpointer.best_step()
            if step is None:
                raise CheckpointError(
                    f"no checkpoint in {checkpointer.directory} was saved with an evaluation "
                    "return: train with --eval-interval N to keep the best one"
                )
        system = build_system(spec)
        state, meta = checkpointer.restore(system.init(spec.seed), step)
    return system, state, meta


def evaluate_run(
    run_dir: str,
    *,
    episodes: int = 10,
    greedy: bool = True,
    step: int | None = None,
    best: bool = False,
) -> dict[str, Any]:
    """Evaluates a saved run's checkpoint (default: the latest; ``best``: the one of the largest
    evaluation return during training): one dict with the mean, std, min and max return over
    ``episodes`` episodes (per seed for Anakin), and the step."""
    from podracer.core.evaluation import summarize_returns

    spec = load_spec(run_dir)
    spec = dataclasses.replace(
        spec, options=dataclasses.replace(spec.options, eval_episodes=episodes, eval_greedy=greedy)
    )
    system, state, meta = restore_run(spec, run_dir, step=step, best=best)
    evaluate = system.evaluator(seed=spec.seed, episodes=episodes, greedy=greedy)
    returns = evaluate(state, int(meta["updates"]))
    return {
        **summarize_returns(returns),
        "per_seed_mean": [float(r) for r in returns.mean(axis=1)],
        "greedy": greedy,
        "updates": int(meta["updates"]),
        "step": int(meta["step"]),
        "run_dir": run_dir,
    }


def video_of_run(
    run_dir: str,
    path: str | None = None,
    *,
    episodes: int = 1,
    member: int | None = None,
    best: bool = False,
    step: int | None = None,
    greedy: bool = True,
    fps: int = 30,
    max_steps: int = 10_000,
) -> dict[str, Any]:
    """``podracer eval RUN_DIR --video [PATH]``: ``episodes`` whole episodes of a saved run's
    greedy policy, captioned, in one video (default ``RUN_DIR/videos/eval-update<U>.mp4``).

    ``step`` picks the checkpoint (default: the latest); ``member`` a population's member, or
    ``best`` its best one by a greedy evaluation (a single run: ``best`` is the checkpoint of
    the best evaluation return, as ``podracer eval --best``)."""
    from podracer.core.evaluation import eval_key
    from podracer.runs import video
    from podracer.runs.media import require_writer, write_video

    spec = load_spec(run_dir)
    if path is not None:
        require_writer(path)
    members_run = spec.population is not None or _members(spec) > 1
    system, state, meta = restore_run(spec, run_dir, step=step, best=best and not members_run)
    video.check_renders(system, spec)
    updates = int(meta["updates"])
    chosen = video.choose_member(system, state, spec.seed, updates, member, best and members_run)
    agent, actor_params = system.policy(state, chosen)
    recorded = []
    for episode in range(episodes):
        key = jax.random.fold_in(eval_key(spec.seed, updates), episode)
        recorded.append(
            video.record(system, spec, agent, actor_params, key, greedy=greedy, max_steps=max_steps)
        )
    path = path or os.path.join(run_dir, VIDEO_DIR, f"eval-update{updates}.mp4")
    shown = chosen if system.num_members > 1 else None
    frames = write_video(
        path, (chunk for e in recorded for chunk in video.caption(e, member=shown)), fps
    )
    return {
        "video": path,
        "frames": frames,
        "episodes": episodes,
        "returns": [e.episode_return for e in recorded],
        "steps": [e.steps for e in recorded],
        "member": chosen,
        "updates": updates,
        "step": int(meta["step"]),
        "run_dir": run_dir,
    }


def _members(spec) -> int:
    return int(getattr(spec.arch_config, "num_seeds", 1) or 1)
