"""Agents and their TOML presets (installed as muzero_gym.agents)."""
