"""The learner skeleton that every learner of the core is (:func:`learner_skeleton`): ``init``,
then each update ``prepare``, a body of gradient steps, ``update_state``; the one gradient step
a body takes (gradient slices, the all-reduce over the data axis, the optimizer); and the
per-device layout of a :class:`~podracer.types.LearnerState`.

It knows nothing of devices or threads: when ``axis_name`` is set it is being called inside
``shard_map`` (or ``vmap``) over that axis, and gradients, batch statistics and metrics are averaged
over it with ``lax.pmean``. Every loop builds its learner with
:func:`podracer.core.learner.build.make_learner` and only chooses the mesh around it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.flatten_util
import jax.numpy as jnp
import optax

from podracer.types import Agent, Learner, LearnerState, LossOutput, MeanFn, Metrics, Trajectory
from podracer.util.ops import varying_axes

AGENT_STATE_STREAM = 3
"""``fold_in`` index of the agent state's key in the learner's init key (the params and the
learner's own key come from ``split``)."""


class BodyTools(NamedTuple):
    """What :func:`learner_skeleton` hands a :data:`LearnerBody`: the one gradient step, the
    layout's loop, and the means over the batch and over the devices. Built by
    :func:`make_body_tools`."""

    gradient_step: Callable[..., tuple[Any, Any, LossOutput]]
    """``gradient_step(params, opt_state, minibatch, key, *, steps_per_sample=1,
    as_batch=None) -> (params, opt_state, LossOutput)``: ``grad(agent.loss)`` of the minibatch
    (its leaves share a leading sample axis; ``as_batch(slice)`` makes what the loss takes of
    it, by default the slice itself), accumulated over the layout's gradient slices, averaged
    over the data axis and applied by the optimizer. The output's metrics have ``grad_norm``;
    its priorities (a replay loss's) are the minibatch's, slices concatenated."""
    loop: Callable[..., Any]
    """``loop(step, carry, xs) -> (carry, ys)``: ``lax.scan`` with the layout's ``unroll``, or
    a Python loop (straight-line code) with ``unroll=True``."""
    batch_mean: MeanFn
    """``batch_mean(x)``: the mean of ``x`` over the whole batch, every device's part of it (what
    ``Agent.prepare`` and ``Agent.update_state`` get as ``mean_fn``)."""
    device_mean: Callable[[Any], Any]
    """``device_mean(tree)``: ``lax.pmean`` over the data axis (the identity on one device)."""
    axis_name: str | None
    """The data axis (``podracer.parallel.DATA_AXIS``), or None on one device."""


class BodyState(NamedTuple):
    """The part of a :class:`~podracer.types.LearnerState` that a :data:`LearnerBody` changes,
    as one device sees it (the device axes of the per-device fields taken off)."""

    params: Any
    opt_state: Any
    agent_state: Any
    """This device's agent state (:func:`one_device`), as ``prepare`` saw it."""
    replay: Any
    """This device's replay buffer; ``()`` without replay."""


LearnerBody = Callable[
    [BodyTools, BodyState, Any, Trajectory, jax.Array], tuple[BodyState, Metrics]
]
"""``body(tools, state, batch, traj, key) -> (state, metrics)``: what a learner does with
``prepare``'s ``batch`` of the trajectory ``traj`` between ``prepare`` and ``update_state``:
its gradient steps, taken with :class:`BodyTools`, on the :class:`BodyState`. ``metrics`` are
averaged over every axis and over the devices by the skeleton. The bodies:
:func:`podracer.core.learner.epochs.epochs` and
:func:`podracer.core.learner.replay.replay_body`."""


def learner_skeleton(
    agent: Agent,
    optimizer: optax.GradientTransformation,
    body: LearnerBody,
    *,
    axis_name: str | None = None,
    unroll: int | bool = 1,
    microbatch_steps: int = 0,
    init_replay: Callable[[Any, Any], Any] | None = None,
) -> Learner:
    """The one learner: ``init`` and ``update`` around a ``body``.

    ``init(key, example_obs)``: the params (``agent.init``), the optimizer state, the learner's
    key, the update count, the agent's slot (``agent.init_state``; per device with
    ``Agent.state_per_device``) and, with ``init_replay(params, example_obs)``, each device's
    replay buffer.

    ``update(state, traj)``:

    1. ``batch = agent.prepare(params, agent_state, traj, mean_fn)``: targets or items from the
       trajectory ``[T, B]``, ``mean_fn`` averaging over the whole batch (``axis_name`` too);
    2. ``body``: the gradient steps (:class:`BodyTools` gives the one ``gradient_step``:
       gradient, ``lax.pmean`` over ``axis_name``, optax update) on the :class:`BodyState`;
    3. ``agent_state = agent.update_state(agent_state, new_params, traj, mean_fn)``: the agent's
       own slot (a target network, statistics), kept equal on every device by ``mean_fn``, or
       each device's own with ``Agent.state_per_device``.

    Metrics are the body's, averaged over its steps and the devices. ``unroll`` is the ``unroll``
    of the body's loops (``True``: Python loops, straight-line code), ``microbatch_steps`` the
    gradient slices (see :func:`make_learner`).
    """
    if microbatch_steps < 0:
        raise ValueError(f"make_learner: microbatch_steps={microbatch_steps} must be >= 0")

    tools = make_body_tools(
        agent, optimizer, axis_name=axis_name, unroll=unroll, microbatch_steps=microbatch_steps
    )
    mean_fn = tools.batch_mean

    def own(agent_state):
        return one_device(agent, agent_state)

    def shared(agent_state):
        return (
            jax.tree.map(lambda x: x[None], agent_state) if agent.state_per_device else agent_state
        )

    def init(key, example_obs) -> LearnerState:
        params_key, state_key = jax.random.split(key)
        params = agent.init(params_key, example_obs)
        replay = () if init_replay is None else init_replay(params, example_obs)
        return LearnerState(
            params=params,
            opt_state=optimizer.init(params),
            key=state_key,
            update_count=jnp.zeros((), jnp.int32),
            agent_state=shared(
                agent.init_state(jax.random.fold_in(key, AGENT_STATE_STREAM), params)
            ),
            replay=jax.tree.map(lambda x: x[None], replay),
        )

    def update(state: LearnerState, traj: Trajectory):
        key, body_key = jax.random.split(state.key)
        agent_state = own(state.agent_state)
        batch = agent.prepare(state.params, agent_state, traj, mean_fn)
        replay = jax.tree.map(lambda x: x[0], state.replay)
        trained = BodyState(state.params, state.opt_state, agent_state, replay)
        trained, metrics = body(tools, trained, batch, traj, body_key)
        metrics = jax.tree.map(lambda m: tools.device_mean(jnp.mean(m)), metrics)
        agent_state = shared(agent.update_state(trained.agent_state, trained.params, traj, mean_fn))
        new_state = LearnerState(
            trained.params,
            trained.opt_state,
            key,
            state.update_count + 1,
            agent_state,
            jax.tree.map(lambda x: x[None], trained.replay),
        )
        return new_state, metrics

    return Learner(init=init, update=update)


def make_body_tools(
    agent: Agent,
    optimizer: optax.GradientTransformation,
    *,
    axis_name: str | None = None,
    unroll: int | bool = 1,
    microbatch_steps: int = 0,
) -> BodyTools:
    """The :class:`BodyTools` a learner's body gets: the one gradient step (``grad(agent.loss)``
    over the layout's gradient slices, the all-reduce over ``axis_name``, the optimizer), the
    layout's loop and the means."""

    def device_mean(x):
        return jax.lax.pmean(x, axis_name) if axis_name is not None else x

    def batch_mean(x):
        return device_mean(jnp.mean(x))

    def local(params, batch):
        return mark_varying(params, batch, axis_name)

    def loss_grad(params, batch, key):
        grads, aux = jax.grad(agent.loss, has_aux=True)(local(params, batch), batch, key)
        return grads, aux if isinstance(aux, LossOutput) else LossOutput(aux)

    def gradient(params, minibatch, key, num_slices: int, as_batch):
        """``grad(agent.loss)`` over the minibatch, as the mean over ``num_slices`` slices."""
        if num_slices == 1:
            return loss_grad(params, as_batch(minibatch), key)
        slices = jax.tree.map(
            lambda x: x.reshape(num_slices, x.shape[0] // num_slices, *x.shape[1:]), minibatch
        )
        keys = jax.random.split(key, num_slices)

        def one(i_or_slice, key):
            return loss_grad(params, as_batch(i_or_slice), key)

        # The first slice outside the loop: its gradients (typed like every slice's inside
        # shard_map) are the accumulator's initial value.
        first, first_out = one(jax.tree.map(lambda x: x[0], slices), keys[0])

        def accumulate(total, slice_and_key):
            grads, out = one(*slice_and_key)
            return jax.tree.map(jnp.add, total, grads), out

        rest = jax.tree.map(lambda x: x[1:], (slices, keys))
        total, outs = loop(accumulate, first, rest)
        grads = jax.tree.map(lambda g: g / num_slices, total)
        metrics = jax.tree.map(
            lambda m0, m: (m0 + jnp.sum(m, axis=0)) / num_slices, first_out.metrics, outs.metrics
        )
        priority = jax.tree.map(
            lambda p0, p: jnp.concatenate([p0, p.reshape(-1, *p.shape[2:])]),
            first_out.priority,
            outs.priority,
        )
        return grads, LossOutput(metrics, priority)

    def num_slices(size: int, steps_per_sample: int) -> int:
        """Slices of a minibatch of ``size`` samples: the fewest of equal size with at most
        ``microbatch_steps`` steps each (one sample each when a sample alone is longer)."""
        if not microbatch_steps:
            return 1
        most = max(1, microbatch_steps // max(1, steps_per_sample))
        return size // max(d for d in range(1, min(most, size) + 1) if size % d == 0)

    def gradient_step(params, opt_state, minibatch, key, *, steps_per_sample=1, as_batch=None):
        size = jax.tree.leaves(minibatch)[0].shape[0]
        slices = num_slices(size, steps_per_sample)
        grads, out = gradient(params, minibatch, key, slices, as_batch or (lambda b: b))
        params, opt_state, grad_norm = optimizer_step(
            optimizer, params, opt_state, grads, axis_name
        )
        return params, opt_state, out._replace(metrics={**out.metrics, "grad_norm": grad_norm})

    def loop(body, carry, xs):
        """``lax.scan``, or with ``unroll=True`` a Python loop: straight-line code with no XLA
        loop at all (``lax.scan(unroll=True)`` keeps a one-trip loop around the unrolled body,
        and XLA:CPU runs a convolution's backward pass inside it as slowly as in any loop)."""
        if unroll is not True:
            return jax.lax.scan(body, carry, xs, unroll=unroll)
        outs = []
        for i in range(jax.tree.leaves(xs)[0].shape[0]):
            carry, out = body(carry, jax.tree.map(lambda x, i=i: x[i], xs))
            outs.append(out)
        return carry, jax.tree.map(lambda *x: jnp.stack(x), *outs)

    return BodyTools(gradient_step, loop, batch_mean, device_mean, axis_name)


def mark_varying(params, batch, axis_name: str | None):
    """``params`` marked as varying over ``axis_name`` when ``batch`` is (``shard_map`` with its
    type check on): otherwise ``jax.grad`` with respect to replicated params already *sums* the
    per-device gradients (the transpose of the implicit broadcast), and a ``pmean`` after it
    would return D times the mean gradient. Marked, each device differentiates its own loss and
    the ``pmean`` averages."""
    leaves = jax.tree.leaves(batch)
    if axis_name is None or not leaves or axis_name not in varying_axes(leaves[0]):
        return params
    return jax.tree.map(
        lambda p: p if axis_name in varying_axes(p) else jax.lax.pcast(p, axis_name, to="varying"),
        params,
    )


def pmean_gradients(grads, axis_name: str | None):
    """The gradients averaged over ``axis_name``: one all-reduce of one flat vector, not one
    per leaf."""
    if axis_name is None:
        return grads
    flat, unravel = jax.flatten_util.ravel_pytree(grads)
    return unravel(jax.lax.pmean(flat, axis_name))


def optimizer_step(optimizer, params, opt_state, grads, axis_name: str | None):
    """``(params, opt_state, grad_norm)`` after one optax step on ``grads`` averaged over
    ``axis_name``: the step every learner of the core takes. ``grad_norm`` is the global norm
    of the averaged gradients, before any clipping: the ``grad_norm`` metric, which the run's
    divergence check reads (:func:`podracer.loops.common.check_finite`)."""
    grads = pmean_gradients(grads, axis_name)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, optax.tree.norm(grads)


def one_device(agent: Agent, agent_state):
    """One device's agent state: with ``Agent.state_per_device`` the first entry of the device
    axis (inside ``shard_map``, this device's own), else the state itself. What ``prepare``,
    ``update_state`` and ``actor_params`` receive."""
    if not agent.state_per_device:
        return agent_state
    return jax.tree.map(lambda x: x[0], agent_state)


def per_device(agent: Agent, state: LearnerState, num_devices: int) -> LearnerState:
    """``state`` (from ``Learner.init``) for ``num_devices`` devices: the replay buffer, and an
    agent state kept per device (``Agent.state_per_device``), repeated to
    ``[num_devices, ...]``, each device starting from the same."""

    def repeat(tree):
        return jax.tree.map(lambda x: jnp.repeat(x, num_devices, axis=0), tree)

    state = state._replace(replay=repeat(state.replay))
    if not agent.state_per_device:
        return state
    return state._replace(agent_state=repeat(state.agent_state))


def state_specs(agent: Agent, spec, device_spec) -> LearnerState:
    """The ``PartitionSpec`` s of a :class:`LearnerState`: ``spec`` for every field, and
    ``device_spec`` (``spec`` with the data axis added) for the replay buffers and an agent
    state kept per device."""
    return LearnerState(
        params=spec,
        opt_state=spec,
        key=spec,
        update_count=spec,
        agent_state=device_spec if agent.state_per_device else spec,
        replay=device_spec,
    )
