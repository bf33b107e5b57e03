"""A Transformer in JAX/Flax whose every scale factor is one ModelConfig knob."""

# Declared here only: setup.py reads it from this file for the package's metadata.
__version__ = "0.2.0"
