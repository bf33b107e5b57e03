"""Experiment 9: positional encodings, each with and without the sqrt(d) embedding scale;
eval loss at 1x, 2x and 4x the training length (64 tokens). Sinusoids in both layouts (the
paper interleaves sin/cos, tensor2tensor concatenates halves), learned (table sized for 4x,
positions past 64 never trained), RoPE, none (causal attention alone).
  python scripts/sweep.py --sweep=configs/sweeps/positions.py --workdir=/tmp/sweeps/positions
"""

from transformer.research.sweeps import Sweep


def get_sweep() -> Sweep:
  return Sweep(
      name="positions",
      question="Eval NLL at the training length (64) and at 2x and 4x, for five position "
               "encodings with and without the sqrt(d) embedding scale.",
      base="configs/lm_tiny.py",
      axes=({"model.posemb": ["sinusoidal", "sinusoidal", "learned", "rope", "none"],
             "model.sinusoid_layout": ["interleaved", "concat", "interleaved", "interleaved",
                                       "interleaved"]},
            {"model.embed_scale": ["sqrt_d", "none"]}),
      fixed={"model.max_len": 256, "diagnostics_every_steps": 100},
      metrics=("length_1x/loss", "length_2x/loss", "length_4x/loss", "final/decoder/embed/ratio"),
      curves=("eval/nll",),
      length_factors=(1, 2, 4),
  )
