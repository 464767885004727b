"""The named offsets that derive every random stream of a run from its one seed.

Each stream is kept apart from the others, so that adding work of one kind (an evaluation, a
population's tournament) never changes what another draws.
"""

ENV_SEED_STRIDE = 10_007
"""Sebulba: actor ``i``'s host environments are seeded ``seed * ENV_SEED_STRIDE + i + 1`` (the
probe environment is actor ``-1``), so runs with neighbouring seeds share no environment seed."""

ENV_SEED_MODULUS = 2**31
"""Host environment seeds are reduced modulo this (envpool takes an int32)."""


def env_seed(seed: int, actor: int) -> int:
    """The seed of actor ``actor``'s host environments (the probe is actor ``-1``)."""
    return (seed * ENV_SEED_STRIDE + actor + 1) % ENV_SEED_MODULUS


ACTOR_KEY_OFFSET = 1
"""Sebulba: actors' acting keys come from ``key(seed + ACTOR_KEY_OFFSET)`` (the learner's from
``key(seed)``), folded with the actor's global index and the rollout number."""

EVAL_SEED_OFFSET = 1_000_003
"""Evaluation's keys and host environments: ``seed + EVAL_SEED_OFFSET``, folded with the update
count, never touch the training state's keys."""

PERIODIC_STREAM = 7
"""Anakin: ``fold_in(member key, PERIODIC_STREAM)`` seeds a population's own keys (evaluation,
tournament), so the periodic work never draws from the training keys."""
