"""``make_learner``: the learner skeleton around the body an agent asks for (epochs or replay)."""

from __future__ import annotations

import optax

from podracer.core.learner.epochs import epochs
from podracer.core.learner.replay import replay_body, replay_init
from podracer.core.learner.skeleton import learner_skeleton
from podracer.types import Agent, Learner


def make_learner(
    agent: Agent,
    optimizer: optax.GradientTransformation,
    *,
    num_epochs: int = 1,
    num_minibatches: int = 1,
    axis_name: str | None = None,
    unroll: int | bool = 1,
    microbatch_steps: int = 0,
    envs_per_device: int = 0,
    no_policy_lag: bool = False,
) -> Learner:
    """Builds ``Learner(init, update)``: :func:`learner_skeleton` around the body the agent
    asks for. Without ``agent.replay``, epochs of minibatches (:func:`epochs`):

    1. ``batch = agent.prepare(params, agent_state, traj, mean_fn)`` — targets from the
       trajectory ``[T, B]``, with ``mean_fn`` averaging over the whole batch (over
       ``axis_name`` too);
    2. ``num_epochs`` passes, each over a fresh permutation of the batch's sample axis cut into
       ``num_minibatches`` minibatches; for each, ``grad(agent.loss)``, ``lax.pmean`` of the
       gradients over ``axis_name`` when set, and the optax update;
    3. ``agent_state = agent.update_state(agent_state, new_params, traj, mean_fn)``.

    With ``agent.replay`` (a :class:`podracer.core.replay.Replay`), the replay body
    (:func:`podracer.core.replay.replay_body`): ``prepare``'s items into this device's buffer,
    then gradient steps on batches sampled from it; ``num_epochs`` and ``num_minibatches`` are
    not used.

    Metrics are the losses' metrics averaged over the gradient steps and devices.

    Args:
      agent: the algorithm (:class:`~podracer.types.Agent`).
      optimizer: an optax transformation (learning-rate schedules count optimizer steps, i.e.
        ``num_epochs * num_minibatches`` per update).
      num_epochs: SGD passes over each update's batch.
      num_minibatches: minibatches per pass; the number of samples per device must be
        divisible by it.
      axis_name: the data-parallel axis (``podracer.parallel.DATA_AXIS``) or None on one device.
      unroll: ``unroll`` of the epoch and minibatch ``lax.scan``s; ``True`` replaces them by
        Python loops, so the update is straight-line code with no XLA loop at all. XLA:CPU runs
        convolution backward passes inside loops many times slower than outside
        (``docs/design.md``; ``lax.scan(unroll=True)`` is not enough: it keeps a one-trip loop
        around the unrolled body), so the loops choose it there
        for image torsos whose convolutions keep JAX's gradient
        (:func:`podracer.loops.layout.learner_layout`; the IMPALA ResNet's go through
        :mod:`podracer.util.ops` and run well in loops); other backends keep the loops.
      microbatch_steps: when > 0, each minibatch's gradient is the mean of the gradients of
        equal slices of at most this many environment steps each (whole samples: one IMPALA
        sample is a sequence), taken one after another — gradient accumulation. For losses that
        are means over samples (every agent here) it is the same gradient up to rounding, with
        a working set that fits in cache, which XLA:CPU takes much faster for an image torso
        (``benchmarks/README.md``). 0: one slice.
        Each slice's loss gets a key of its own.
      envs_per_device: the environments of one device's share of a trajectory; what a replay
        of windows (sequences, :class:`podracer.core.replay.Replay`) keeps a stream for each
        (the loops give it; other learners do not use it).
      no_policy_lag: the trajectories were acted by the very params ``update`` is given (the
        Anakin loop): ``agent.prepare_no_lag`` is used where the agent has one, reusing what
        the actors computed instead of computing it again.

    Returns:
      ``Learner(init, update)``: ``init(key, example_obs) -> LearnerState`` and
      ``update(state, traj) -> (state, metrics)``, pure functions that know no devices beyond
      ``axis_name``.
    """
    if no_policy_lag and agent.prepare_no_lag is not None:
        agent = agent._replace(prepare=agent.prepare_no_lag)
    layout = dict(axis_name=axis_name, unroll=unroll, microbatch_steps=microbatch_steps)
    if agent.replay is not None:
        return learner_skeleton(
            agent,
            optimizer,
            replay_body(agent.replay, envs_per_device),
            init_replay=replay_init(agent.replay, envs_per_device),
            **layout,
        )
    return learner_skeleton(agent, optimizer, epochs(num_epochs, num_minibatches), **layout)
