"""E3: Question 1 in pre-LN models (what most people train now). A norm before every
sub-layer removes the overall input scale from attention's and the FFN's inputs, but the
residual stream still carries the raw embedding sum; Takase et al. 2023 ("Spike No More")
argue that the embedding's scale matters there for stability (loss and gradient spikes).
norm_position='pre' x {no scale, sqrt(d) on the token, a norm on the summed input embedding
(embed_norm)} x embedding init std {0.02, d^-0.5}, each arm at its own best learning rate,
3 seeds (and 2 more at each chosen rate); loss and gradient-norm spikes counted per 10-step
window after warmup
(transformer.research.sweeps.stats.spike_stats: a step's loss 20% above the previous
window's mean, a step's gradient norm over 4x the run's median).
  python scripts/sweep.py --sweep=configs/sweeps/e3_pre_ln.py --workdir=docs/sweeps/e3_pre_ln
"""

from transformer.research.sweeps import Sweep


def get_sweep() -> Sweep:
  return Sweep(
      name="e3_pre_ln",
      question="Test NLL and loss / gradient-norm spikes of pre-LN models with no embedding "
               "scale, sqrt(d) or an embedding norm, at init std 0.02 and d^-0.5, each arm at "
               "its own best learning rate.",
      base="configs/lm_tiny.py",
      axes=({"model.embed_init_std": [0.02, "inv_sqrt_d"]},
            {"model.embed_scale": ["none", "sqrt_d", "none"],
             "model.embed_norm": [False, False, True]}),
      fixed={"test_fraction": 0.02, "model.norm_position": "pre", "log_every_steps": 10},
      tune={"learning_rate": [5e-3, 1e-2, 2e-2]},  # 4e-2 only where an edge asks
      extend_edges=2,
      confirm_seeds=(3, 4),  # 5 seeds at each chosen rate: some differences are small
      contrast="model.embed_scale",  # sqrt(d) and embed_norm against no scale, at each init
      arm_names=("0.02,none", "0.02,sqrt_d", "0.02,embed_norm",
                 "inv_sqrt_d,none", "inv_sqrt_d,sqrt_d", "inv_sqrt_d,embed_norm"),
      metrics=("eval/loss", "test/loss", "spikes/loss", "spikes/loss_max_jump",
               "spikes/grad_norm", "spikes/grad_norm_max_ratio", "final/decoder/embed/ratio"),
      curves=("eval/loss", "train/loss_step_max", "train/grad_norm_step_max"),
  )
