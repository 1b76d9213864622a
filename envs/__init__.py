"""Custom Gymnasium environments shipped with muzero_gym (installed as muzero_gym.envs)."""
