"""Craftax (Crafter in JAX, and its larger successor) behind podracer's
:class:`~podracer.types.Environment` contract.

Ids are ``craftax:<name>`` with ``<name>`` one of :data:`KNOWN`: ``Craftax-Classic-Symbolic-v1``
and ``Craftax-Symbolic-v1`` (observations f32 ``[1345]`` and ``[8268]``: the local map one-hot
and the inventory and status, flattened) and the pixel variants ``Craftax-Classic-Pixels-v1``
and ``Craftax-Pixels-v1`` (f32 ``[63, 63, 3]`` and ``[130, 110, 3]`` images in ``[0, 1]``), as
Craftax gives them (``observation_spec`` from its observation space). Actions are discrete:
i32 ``[]`` in ``{0, ..., 16}`` (Classic) or ``{0, ..., 42}``; every action is always legal (no
mask; an action that cannot be done does nothing). ``default_params`` is Craftax's
``EnvParams`` (an array pytree: a batch may vary them); keyword arguments of
:func:`podracer.envs.make` replace its fields (``max_timesteps``: the time limit, 10,000 steps
for Classic and 100,000 for Craftax; ``day_length``, ...), as does
:meth:`CraftaxEnvironment.with_params`. Craftax's ``info`` (achievements, score) is not passed
on.

Termination and truncation: Craftax's ``done`` is ``is_game_over``, which is true at the time
limit (``state.timestep >= max_timesteps``) as well as at a true end, and its
``info["discount"]`` is 0 at both, so neither tells them apart. The adapter does: an episode is
``terminated`` when the game is over without counting the time limit (``is_terminal`` of the
stepped state with ``max_timesteps`` lifted: the player's death, ``player_health <= 0``, or, in
Classic, standing in lava; in Craftax also the final boss beaten), and ``truncated`` when it
ended at the time limit only. A death on the time limit's last step is terminated.

Auto-reset: the environment is made with ``make_craftax_env_from_name(name, auto_reset=False)``
and reset here, at the step that ends an episode, as Craftax's own auto-reset variant does:
``step_key, reset_key = jax.random.split(key)``, Craftax's step gets ``step_key`` and, when the
episode ended, the state and observation are those of ``craftax_env.reset(reset_key, params)``,
``final_obs`` keeping the last observation of the episode that ended. The state is Craftax's
``EnvState``. A reset generates a world (about 30 steps' time), so the loops step batches with
:meth:`CraftaxEnvironment.step_batch`, which resets only the episodes that ended.

``shard_map``: the observation renderers (all four variants') scan from a constant map or image
as the initial carry to one that depends on the state, which a ``shard_map`` that checks varying
manual axes (JAX 0.10's default, ``check_vma=True``) refuses ("scan body function carry input
and carry output must have equal types"). The environment says ``check_vma = False``, so Anakin
(and the sweeps and populations) run their ``shard_map`` unchecked, where the step traces
(tested; its values are those of ``jit`` / ``vmap`` as for the other suites); in a checked
``shard_map`` :meth:`CraftaxEnvironment.step` raises a
:class:`~podracer.errors.ConfigValueError` that says so.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from podracer.envs.jax import base
from podracer.types import DiscreteActionSpec, ObservationSpec, TimeStep

PREFIX = "craftax:"

KNOWN: tuple[str, ...] = (
    "Craftax-Classic-Symbolic-v1",
    "Craftax-Symbolic-v1",
    "Craftax-Classic-Pixels-v1",
    "Craftax-Pixels-v1",
)
"""Every environment of craftax 1.6's ``make_craftax_env_from_name`` (without its auto-reset
aliases)."""


def names() -> tuple[str, ...]:
    """The names :func:`make` takes (:data:`KNOWN`)."""
    return KNOWN


def make(env_id: str, **kwargs: Any) -> CraftaxEnvironment:
    """``craftax:<name>``, with fields of its ``EnvParams`` as keyword arguments."""
    name = env_id.removeprefix(PREFIX)
    base.check_name(env_id, name, KNOWN, PREFIX)
    craftax_env = base.require("craftax.craftax_env", env_id)
    env = craftax_env.make_craftax_env_from_name(name, auto_reset=False)
    params = env.default_params
    return CraftaxEnvironment(env_id, env, base.replace_fields(env_id, "Craftax", params, kwargs))


def reset_sizes(batch: int) -> list[int]:
    """The numbers of resets :meth:`CraftaxEnvironment.step_batch` chooses among for a batch of
    ``batch``: 0, then ``batch`` divided by 4, 16, ... down to ``max(1, batch // 256)``, and
    ``batch`` itself (at most 4 times the resets needed, in at most 6 branches)."""
    sizes = {0, batch}
    size = batch // 4
    while size >= max(1, batch // 256):
        sizes.add(size)
        size //= 4
    sizes.add(max(1, batch // 256))
    return sorted(sizes)


class CraftaxEnvironment(base.Adapter):
    """A Craftax environment (made with ``auto_reset=False``), auto-resetting at the step that
    ends an episode, with the time limit a truncation."""

    check_vma = False  # Craftax's renderers fail a checked shard_map (the module's docstring)
    library = "Craftax"

    def _specs(self, params: Any) -> tuple[ObservationSpec, DiscreteActionSpec]:
        space = self._env.observation_space(params)
        obs_spec = ObservationSpec(tuple(space.shape), jnp.dtype(space.dtype))
        return obs_spec, DiscreteActionSpec(int(self._env.num_actions))

    def _reset(self, key, params):
        obs, state = self._env.reset(key, params)
        return state, obs

    def _step_only(self, key, state, action, params):
        """Craftax's step without the reset: the stepped state and its ``TimeStep`` (``obs``
        the stepped observation), whether the episode ended, and the key its reset takes."""
        step_key, reset_key = jax.random.split(key)
        obs, stepped, reward, done, _ = self._traced(
            self._env.step, step_key, state, jnp.asarray(action, jnp.int32), params
        )
        done = jnp.asarray(done, bool)
        # The game over without the time limit: the episode's true end.
        no_limit = params.replace(max_timesteps=jnp.iinfo(jnp.int32).max)
        terminated = done & jnp.asarray(self._env.is_terminal(stepped, no_limit), bool)
        ts = TimeStep(
            obs=obs,
            reward=jnp.asarray(reward, jnp.float32),
            terminated=terminated,
            truncated=done & ~terminated,
            final_obs=obs,
        )
        return stepped, ts, done, reset_key

    def step(self, key, state, action, params):
        stepped, ts, done, reset_key = self._step_only(key, state, action, params)
        if not self.auto_reset:
            return stepped, ts
        reset_obs, reset_state = self._env.reset(reset_key, params)
        state, next_obs = base.select_tree(done, (reset_state, reset_obs), (stepped, ts.obs))
        return state, ts._replace(obs=next_obs)

    def step_batch(self, keys, state, action, params):
        """:meth:`step` vmapped over ``keys [B]``, with only the ended episodes reset.

        A reset generates a world and costs about 30 steps, and vmapped, :meth:`step` resets
        every environment at every step (a select of both branches). Here the batch is stepped,
        then ``lax.switch`` on the number of episodes that ended picks the smallest of
        :func:`reset_sizes` that holds them: none, or that many resets (the ended ones gathered
        with their own reset keys; all ``B`` selected as :meth:`step` does): the same values as
        :meth:`step` vmapped (tested). Vmapped once more (several seeds on a device with
        ``member_loop="vmap"``), the switch runs every branch.
        """
        step_only = jax.vmap(self._step_only, in_axes=(0, 0, 0, None))
        stepped, ts, done, reset_keys = step_only(keys, state, action, params)
        reset = jax.vmap(self._env.reset, in_axes=(0, None))
        batch = done.shape[0]
        sizes = reset_sizes(batch)

        def reset_some(size):
            def branch(_):
                if size == 0:
                    return stepped, ts.obs
                if size == batch:
                    reset_obs, reset_state = reset(reset_keys, params)
                    return base.select_tree(done, (reset_state, reset_obs), (stepped, ts.obs))
                index = jnp.nonzero(done, size=size, fill_value=batch)[0]  # past the end: none
                reset_obs, reset_state = reset(reset_keys[jnp.minimum(index, batch - 1)], params)
                return jax.tree.map(
                    lambda x, r: x.at[index].set(r, mode="drop"),
                    (stepped, ts.obs),
                    (reset_state, reset_obs),
                )

            return branch

        branch = jnp.searchsorted(jnp.asarray(sizes), done.sum())
        state, next_obs = jax.lax.switch(branch, [reset_some(size) for size in sizes], None)
        return state, ts._replace(obs=next_obs)
