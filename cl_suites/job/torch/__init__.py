"""The torch wing of the job layer: the stable-baselines3/torch learners of
``baselines_sb3`` (``ppo``, ``vtrace``).

``entry`` holds their registry entries (imports no torch), ``options`` their options'
declarations and routing, ``device`` the torch device of a run, ``sb3_env`` the SB3 view
of a suite's training env and ``device_observations`` where its observations live,
``train`` the job that trains one run, ``checkpoint`` its checkpoints and resume,
``tracking`` SB3's logger.
"""
