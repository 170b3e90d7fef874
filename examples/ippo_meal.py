"""IPPO on a MEAL sequence (multi-agent Overcooked kitchens), CleanRL style.

Independent PPO with parameter sharing, as MEAL's baselines: one policy acts for every
agent of every kitchen (each agent is one row of the batch). The env is the batched MEAL
sequence (``num_envs`` kitchens stepped by one jitted JAX call, all switching task
together); the only cl-suites plumbing is the ``Recorder``, which builds it, evaluates the
greedy policy on every kitchen on the suite's schedule and writes the run directory that
``cl-suites report`` reads (MEAL's metrics, with the published rows beside it). Steps are
env steps (one joint action of all agents); the defaults are a short run, not MEAL's 10M
steps per task::

    python examples/ippo_meal.py --run-dir runs/ippo-meal
    cl-suites report runs/ippo-meal
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Categorical

import cl_suites
from cl_suites.meal.suite import NUM_ACTIONS


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run-dir", default="runs/ippo-meal")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--suite", default="MEAL-2", help="MEAL-<N>: N kitchens")
    p.add_argument("--steps-per-task", type=int, default=102_400, help="env steps per task")
    p.add_argument("--eval-every", type=int, default=25_600, help="env steps")
    p.add_argument("--eval-episodes", type=int, default=4)
    p.add_argument("--eval-max-episode-steps", type=int, default=None, help="eval-only cap")
    p.add_argument("--num-envs", type=int, default=16, help="kitchens stepped together")
    p.add_argument("--num-steps", type=int, default=32, help="rollout length per env")
    p.add_argument("--learning-rate", type=float, default=3e-4)
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
    """Actor and critic MLPs over one agent's flattened ``(H, W, C)`` grid."""

    def __init__(self, obs_dim: int, n_actions: int):
        super().__init__()

        def mlp(out: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Flatten(), nn.Linear(obs_dim, 128), nn.Tanh(), nn.Linear(128, 128),
                nn.Tanh(), nn.Linear(128, out),
            )  # fmt: skip

        self.actor, self.critic = mlp(n_actions), mlp(1)

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x.float())

    def get_action_and_value(self, x: torch.Tensor, action: torch.Tensor | None = None):
        dist = Categorical(logits=self.actor(x.float()))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(x.float())


def main(argv: list[str] | None = None) -> str:
    args = parse_args(argv)
    torch.set_num_threads(args.torch_threads)  # benchmarks/results/LOG.md, bench_contention.py
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    rec = cl_suites.Recorder(
        args.run_dir, args.suite, num_envs=args.num_envs, seed=args.seed,
        method="cleanrl-ppo", hyperparameters=vars(args), progress=args.progress,
        rollout_steps=args.num_steps,  # shaping weight held per update, as MEAL's trainer
        steps_per_task=args.steps_per_task, eval_every=args.eval_every,
        eval_episodes=args.eval_episodes, eval_max_episode_steps=args.eval_max_episode_steps,
    )  # fmt: skip
    envs = rec.envs
    obs_shape = envs.suite.obs_shape  # one agent's (H, W, C)
    agent = Agent(int(np.prod(obs_shape)), NUM_ACTIONS)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    @torch.no_grad()
    def greedy(obs: np.ndarray, task_ids: np.ndarray) -> np.ndarray:  # evaluation policy
        return agent.actor(torch.as_tensor(obs, dtype=torch.float32)).argmax(-1).numpy()

    def rows(x: np.ndarray) -> torch.Tensor:  # (num_envs, num_agents, ...) -> agent rows
        return torch.as_tensor(np.array(x)).reshape(n, *np.shape(x)[2:])

    n, t = args.num_envs * envs.num_agents, args.num_steps  # n: agent rows
    obs_buf = torch.zeros((t, n, *obs_shape), dtype=torch.uint8)
    actions, logprobs, rewards, dones, values = (torch.zeros((t, n)) for _ in range(5))
    with rec:
        next_obs, infos = envs.reset(seed=args.seed)
        rec.step(infos, greedy)
        next_obs, next_done = rows(next_obs), torch.zeros(n)
        while not rec.done:
            for step in range(t):
                obs_buf[step], dones[step] = next_obs, next_done
                with torch.no_grad():
                    action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step], actions[step], logprobs[step] = value.flatten(), action, logprob
                joint = action.numpy().reshape(args.num_envs, envs.num_agents)
                next_obs, reward, term, trunc, infos = envs.step(joint)
                rec.step(infos, greedy)  # episodes, evaluation on schedule, progress
                rewards[step] = rows(reward).float()
                next_obs, next_done = rows(next_obs), rows(np.logical_or(term, trunc)).float()
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
            b_obs = obs_buf.reshape((-1, *obs_shape))
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
