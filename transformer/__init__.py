"""A Transformer in JAX/Flax whose every scale factor is one ModelConfig knob."""
