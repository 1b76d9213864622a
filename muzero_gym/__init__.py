"""muzero_gym: MuZero agents for Gymnasium environments with discrete action spaces."""

__version__ = "0.1.0"
