"""Optimizers shared by the agents."""

from __future__ import annotations

import optax


def clipped_adam(
    lr: float | optax.Schedule, max_grad_norm: float, *, eps: float = 1e-8
) -> optax.GradientTransformation:
    """Adam, after clipping gradients to a global norm of ``max_grad_norm`` (0: no clipping)."""
    parts = [optax.clip_by_global_norm(max_grad_norm)] if max_grad_norm > 0 else []
    return optax.chain(*parts, optax.adam(lr, eps=eps))


def constant_adam(config, num_updates: int) -> optax.GradientTransformation:
    """An agent's ``make_optimizer`` by default (:class:`~podracer.agents.AgentSpec`): Adam at the
    constant learning rate ``config.lr`` after clipping gradients to a global norm of
    ``config.max_grad_norm`` (0: no clipping); ``num_updates`` is not used."""
    del num_updates
    return clipped_adam(config.lr, config.max_grad_norm)
