"""loadtune: measure which DataLoader settings keep the accelerator fed."""

__version__ = "0.1.0"
