"""An agent that stacks frames, CleanRL style, evaluated through its own wrappers.

The loop builds its env itself, ``gym.make("CLSuite/Diagnostic-v0")`` under gymnasium's
``FrameStackObservation``, and trains a small actor-critic (A2C: n-step returns, one
update per rollout) on the stacked frames. ``cl_suites.Recorder(env=env)`` takes that env:
the evaluator rebuilds the same wrappers around its evaluation envs, so the greedy policy
gets stacked frames at evaluation too (``(B, stack, obs_dim)``), never single frames::

    python examples/frame_stack_agent.py --run-dir runs/frame-stack
    cl-suites report runs/frame-stack
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Categorical

import cl_suites


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run-dir", default="runs/frame-stack")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps-per-task", type=int, default=2_000, help="agent steps per task")
    p.add_argument("--n-tasks", type=int, default=2)
    p.add_argument("--eval-every", type=int, default=500, help="agent steps")
    p.add_argument("--eval-episodes", type=int, default=4)
    p.add_argument("--stack", type=int, default=4, help="frames per observation")
    p.add_argument("--num-steps", type=int, default=16, help="rollout length")
    p.add_argument("--learning-rate", type=float, default=3e-3)
    p.add_argument("--gamma", type=float, default=0.9)
    p.add_argument("--ent-coef", type=float, default=0.01)
    p.add_argument("--torch-threads", type=int, default=1)
    return p.parse_args(argv)


class Agent(nn.Module):
    """An MLP over the flattened stack of frames: ``(B, stack, obs_dim)`` in."""

    def __init__(self, stack: int, obs_dim: int, n_actions: int):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(stack * obs_dim, 64), nn.Tanh())
        self.actor, self.critic = nn.Linear(64, n_actions), nn.Linear(64, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(obs)
        return self.actor(h), self.critic(h).squeeze(-1)


def main(argv: list[str] | None = None) -> str:
    args = parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    torch.manual_seed(args.seed)
    suite = dict(steps_per_task=args.steps_per_task, n_tasks=args.n_tasks,
                 eval_every=args.eval_every, eval_episodes=args.eval_episodes)  # fmt: skip
    env = gym.wrappers.FrameStackObservation(
        gym.make("CLSuite/Diagnostic-v0", **suite), stack_size=args.stack
    )
    rec = cl_suites.Recorder(
        args.run_dir, "Diagnostic", env=env, seed=args.seed, method="cleanrl-frame-stack",
        hyperparameters=vars(args), **suite,
    )  # fmt: skip
    stack, obs_dim = env.observation_space.shape
    agent = Agent(stack, obs_dim, int(env.action_space.n))
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate)

    @torch.no_grad()
    def greedy(obs: np.ndarray, task_ids: np.ndarray) -> np.ndarray:  # (B, stack, obs_dim)
        return agent(torch.as_tensor(obs, dtype=torch.float32))[0].argmax(-1).numpy()

    with rec:
        obs, infos = env.reset(seed=args.seed)
        rec.step(infos, greedy)
        while not rec.done:
            logps, values, entropies, rewards, ends = [], [], [], [], []
            for _ in range(args.num_steps):
                logits, value = agent(torch.as_tensor(obs[None], dtype=torch.float32))
                dist = Categorical(logits=logits)
                action = dist.sample()
                obs, reward, term, trunc, infos = env.step(int(action))
                rec.step(infos, greedy)  # episodes, evaluation through the frame stack
                logps.append(dist.log_prob(action)[0])
                values.append(value[0])
                entropies.append(dist.entropy()[0])
                rewards.append(float(reward))
                ends.append(bool(term))
                if term or trunc:
                    if rec.done:
                        break
                    obs, _ = env.reset()  # the next episode (after a switch: the next task)
                    break
            with torch.no_grad():
                ret = 0.0 if ends[-1] else float(agent(torch.as_tensor(obs[None]).float())[1])
            returns = []
            for r in reversed(rewards):
                ret = r + args.gamma * ret
                returns.append(ret)
            returns_t = torch.tensor(returns[::-1])
            values_t, logps_t = torch.stack(values), torch.stack(logps)
            adv = returns_t - values_t.detach()
            loss = (-(logps_t * adv).mean() + 0.5 * ((returns_t - values_t) ** 2).mean()
                    - args.ent_coef * torch.stack(entropies).mean())  # fmt: skip
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return str(rec.run_dir)


if __name__ == "__main__":
    print(f"run directory written: {main()} (now: cl-suites report <it>)")
