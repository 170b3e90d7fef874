"""PPO on Procgen6 (CORA's six games in sequence), CleanRL style, with a run directory.

CleanRL's ``ppo_procgen.py`` layout (args, agent, rollout, update) on the continual
Procgen6 env; its only cl-suites plumbing is the ``Recorder``: it builds the env (one
budget for all sub-envs, task switches), evaluates the greedy policy on train and test
levels on the suite's schedule and writes the run directory that ``cl-suites report``
reads (with CORA's published rows beside it). The network is a small CNN for CPUs.
Steps are agent steps (summed over sub-envs); the defaults are a short run, not CORA's
5M steps per game::

    python examples/ppo_procgen.py --run-dir runs/ppo-procgen
    cl-suites report runs/ppo-procgen
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
    p.add_argument("--run-dir", default="runs/ppo-procgen")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps-per-task", type=int, default=50_000, help="agent steps per task")
    p.add_argument("--cycles", type=int, default=1, help="passes over the six games (CORA: 5)")
    p.add_argument("--eval-every", type=int, default=25_000, help="agent steps")
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--eval-max-episode-steps", type=int, default=None, help="eval-only cap")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--num-steps", type=int, default=64, help="rollout length per env")
    p.add_argument("--learning-rate", type=float, default=5e-4)
    p.add_argument("--update-epochs", type=int, default=4)
    p.add_argument("--num-minibatches", type=int, default=4)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--clip-coef", type=float, default=0.2)
    p.add_argument("--ent-coef", type=float, default=0.01)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--torch-threads", type=int, default=1, help="1 holds up on busy machines")
    p.add_argument("--progress", action="store_true", help="draw the progress bar")
    return p.parse_args(argv)


class Agent(nn.Module):
    """A shared CNN torso over ``(B, 64, 64, 3)`` uint8 frames, actor and critic heads."""

    def __init__(self, n_actions: int):
        super().__init__()
        self.torso = nn.Sequential(
            nn.Conv2d(3, 16, 8, stride=4), nn.ReLU(),
            nn.Conv2d(16, 32, 4, stride=2), nn.ReLU(),
            nn.Flatten(), nn.Linear(32 * 6 * 6, 256), nn.ReLU(),
        )  # fmt: skip
        self.actor = nn.Linear(256, n_actions)
        self.critic = nn.Linear(256, 1)

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        return self.torso(x.permute(0, 3, 1, 2).float() / 255.0)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.actor(self.hidden(x))

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(self.hidden(x))

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None):
        hidden = self.hidden(x)
        dist = Categorical(logits=self.actor(hidden))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(hidden)


def main(argv: list[str] | None = None) -> str:
    args = parse_args(argv)
    torch.set_num_threads(args.torch_threads)  # benchmarks/results/LOG.md, bench_contention.py
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    rec = cl_suites.Recorder(
        args.run_dir, "Procgen6", num_envs=args.num_envs, seed=args.seed,
        method="cleanrl-ppo", hyperparameters=vars(args), progress=args.progress,
        steps_per_task=args.steps_per_task, cycles=args.cycles, eval_every=args.eval_every,
        eval_episodes=args.eval_episodes, eval_max_episode_steps=args.eval_max_episode_steps,
    )  # fmt: skip
    # gymnasium's own episode statistics (infos["episode"]), as CleanRL's scripts start;
    # the Recorder logs the env's own infos["task_episode"] (with the task) to episodes.csv
    envs = gym.wrappers.vector.RecordEpisodeStatistics(rec.envs)
    agent = Agent(envs.single_action_space.n)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    @torch.no_grad()
    def greedy(obs: np.ndarray, task_ids: np.ndarray) -> np.ndarray:  # evaluation policy
        return agent.logits(torch.as_tensor(obs)).argmax(-1).numpy()

    n, t = args.num_envs, args.num_steps
    obs_buf = torch.zeros((t, n, *envs.single_observation_space.shape), dtype=torch.uint8)
    actions, logprobs, rewards, dones, values = (torch.zeros((t, n)) for _ in range(5))
    with rec:
        next_obs, infos = envs.reset(seed=args.seed)
        rec.step(infos, greedy)
        next_obs, next_done = torch.as_tensor(next_obs), torch.zeros(n)
        while not rec.done:
            for step in range(t):
                obs_buf[step], dones[step] = next_obs, next_done
                with torch.no_grad():
                    action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step], actions[step], logprobs[step] = value.flatten(), action, logprob
                next_obs, reward, term, trunc, infos = envs.step(action.numpy())
                rec.step(infos, greedy)  # episodes, evaluation on schedule, progress
                rewards[step] = torch.as_tensor(reward, dtype=torch.float32)
                next_obs = torch.as_tensor(next_obs)
                next_done = torch.as_tensor(np.logical_or(term, trunc), dtype=torch.float32)
                if rec.done:
                    break
            if rec.done:
                break
            with torch.no_grad():  # GAE
                next_value = agent.get_value(next_obs).flatten()
                advantages, lastgaelam = torch.zeros_like(rewards), 0.0
                for s in reversed(range(t)):
                    nonterminal = 1.0 - (next_done if s == t - 1 else dones[s + 1])
                    nextvalues = next_value if s == t - 1 else values[s + 1]
                    delta = rewards[s] + args.gamma * nextvalues * nonterminal - values[s]
                    lastgaelam = delta + args.gamma * args.gae_lambda * nonterminal * lastgaelam
                    advantages[s] = lastgaelam
                returns = advantages + values
            b_obs = obs_buf.reshape((-1, *envs.single_observation_space.shape))
            b_actions, b_logprobs = actions.reshape(-1), logprobs.reshape(-1)
            b_adv, b_returns = advantages.reshape(-1), returns.reshape(-1)
            batch = n * t
            for _ in range(args.update_epochs):
                for mb in np.array_split(np.random.permutation(batch), args.num_minibatches):
                    _, newlogprob, entropy, newvalue = agent.get_action_and_value(
                        b_obs[mb], b_actions[mb].long()
                    )
                    ratio = (newlogprob - b_logprobs[mb]).exp()
                    adv = (b_adv[mb] - b_adv[mb].mean()) / (b_adv[mb].std() + 1e-8)
                    pg_loss = torch.max(
                        -adv * ratio,
                        -adv * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef),
                    ).mean()
                    v_loss = 0.5 * ((newvalue.flatten() - b_returns[mb]) ** 2).mean()
                    loss = pg_loss - args.ent_coef * entropy.mean() + args.vf_coef * v_loss
                    optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                    optimizer.step()
    return str(rec.run_dir)


if __name__ == "__main__":
    print(f"run directory written: {main()} (now: cl-suites report <it>)")
