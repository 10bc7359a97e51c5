"""paddlike: a Paddle-style distributed-training launcher and runtime."""

__version__ = "0.1.0"
