"""Notices several single sequence envs of one suite stepped in turn in one process.

That is how gymnasium's ``SyncVectorEnv([make_env] * N)`` (CleanRL's pattern), SB3's
``make_vec_env`` (``DummyVecEnv``) and SuperSuit's ``concat_vec_envs`` batch an env: N
independent sequences, each with the whole budget, so every task trains N times its
budget. A sequence env cannot refuse being copied, so it warns, naming the batched
constructors that share one budget.
"""

from __future__ import annotations

import warnings


class TurnWatch:
    """One per sequence env; the env calls ``new_turn`` on a step only when another env
    stepped last (``TurnWatch.last is not watch``: one identity test per step).

    A *turn* is a run of consecutive steps of one env in this process. An env that comes
    back after a turn of exactly one step, with an env of the same suite stepped in
    between, is being stepped in lockstep with it: it warns once.
    """

    last: TurnWatch | None = None
    """The watch of the env that stepped last in this process."""

    __slots__ = ("advice", "suite", "turn_start", "warned")

    def __init__(self, suite: str, advice: str):
        """``suite``: the sequence's name; ``advice``: how to build N sub-envs that share
        one budget (ends the warning)."""
        self.suite = suite
        self.advice = advice
        self.turn_start: int | None = None
        self.warned = False

    def new_turn(self, steps: int) -> None:
        """Start a turn of this env; ``steps`` counts the steps it has played so far (in
        the suite's unit)."""
        previous, TurnWatch.last = TurnWatch.last, self
        if (
            not self.warned
            and self.turn_start is not None
            and steps - self.turn_start == 1
            and previous is not None
            and previous.suite == self.suite
        ):
            self.warned = True
            warnings.warn(
                f"several {self.suite} sequence envs are stepped in turn in this process "
                "(as gymnasium's SyncVectorEnv([make_env] * N), SB3's make_vec_env or "
                "SuperSuit's concat_vec_envs batch them): each is an independent sequence "
                "with the whole budget, so every task trains N times its budget. For N "
                f"sub-envs that share one budget and switch task together use {self.advice}",
                UserWarning,
                stacklevel=3,
            )
        self.turn_start = steps
