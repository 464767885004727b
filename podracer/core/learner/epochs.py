"""The on-policy learner's body: epochs of minibatches over each update's batch."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from podracer.core.learner.skeleton import BodyState, BodyTools, LearnerBody
from podracer.errors import ConfigValueError
from podracer.types import Trajectory


def epochs(num_epochs: int, num_minibatches: int) -> LearnerBody:
    """The on-policy body: ``num_epochs`` passes over ``prepare``'s batch, each over a fresh
    permutation of its sample axis cut into ``num_minibatches`` minibatches, one ``gradient_step``
    each."""
    if num_epochs < 1:
        raise ValueError(f"make_learner: num_epochs={num_epochs} must be >= 1")
    if num_minibatches < 1:
        raise ValueError(f"make_learner: num_minibatches={num_minibatches} must be >= 1")

    def body(tools: BodyTools, state: BodyState, batch, traj: Trajectory, key):
        num_samples = jax.tree.leaves(batch)[0].shape[0]
        if num_samples % num_minibatches:
            raise ConfigValueError(
                f"make_learner: num_minibatches={num_minibatches} does not divide the "
                f"{num_samples} samples of a batch on one device; choose a divisor of "
                f"{num_samples} (a sample is a transition, or a whole sequence for agents that "
                "need time: with memory, one environment's window of sequence_window steps)"
            )
        size = num_samples // num_minibatches
        steps_per_sample = traj.reward.size // num_samples

        def step(carry, minibatch_and_key):
            params, opt_state, out = tools.gradient_step(
                *carry, *minibatch_and_key, steps_per_sample=steps_per_sample
            )
            return (params, opt_state), out.metrics

        def epoch(carry, key):
            perm_key, loss_key = jax.random.split(key)
            if num_minibatches == 1:
                shuffled = batch  # one minibatch of everything: order cannot matter
            else:
                perm = jax.random.permutation(perm_key, num_samples)
                shuffled = jax.tree.map(lambda x: jnp.take(x, perm, axis=0), batch)
            minibatches = jax.tree.map(
                lambda x: x.reshape(num_minibatches, size, *x.shape[1:]), shuffled
            )
            keys = jax.random.split(loss_key, num_minibatches)
            return tools.loop(step, carry, (minibatches, keys))

        (params, opt_state), metrics = tools.loop(
            epoch, (state.params, state.opt_state), jax.random.split(key, num_epochs)
        )
        return state._replace(params=params, opt_state=opt_state), metrics

    return body
