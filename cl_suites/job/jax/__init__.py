"""The JAX wing of the job layer: MEAL's JAX IPPO of ``baselines_jax`` (``ppo-jax``).

``entry`` holds its registry entry, its options and their translation from the one preset
table (imports no JAX until asked), ``train`` the job that trains one seed or several
vmapped in one program, ``checkpoint`` its checkpoints. Nothing here imports torch.
"""
