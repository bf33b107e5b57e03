"""The contrasts docs/findings.md quotes beyond each sweep's own paired table: interactions,
and arms of two sweeps whose runs read the same data (E1 and E2, T1 and T2: the same corpus,
split rule and tokenizer, so a seed draws the same split in both; the build checks it). Each
arm is at its own chosen rate in its own sweep. A contrast across model sizes (E5's and W1's
widths, M9 against M1 and M4, T2 against T1) names its terms of each size in `sizes`: one seed
shares the data there but not the initial draws, so the page adds Welch's unpaired interval.
  python scripts/contrasts.py --config=configs/contrasts.py --out=docs/contrasts.md
"""

from transformer.research.sweeps.contrasts import Contrast


def _e2(init: str, tied: bool, scale: str) -> tuple[str, str]:
  return ("e2_mechanism", f"embed_init_std={init},logits_via_embedding={tied},embed_scale={scale}")


def _by_sweep(plus: tuple, minus: tuple) -> tuple:
  """`sizes` for terms whose sweeps are of one model size each: their terms grouped by sweep."""
  sweeps = sorted({sweep for sweep, _ in plus + minus})
  return tuple(tuple(t for t in plus + minus if t[0] == sweep) for sweep in sweeps)


def _across(name: str, plus: tuple, minus: tuple) -> Contrast:
  return Contrast(name, plus=plus, minus=minus, sizes=_by_sweep(plus, minus))


def get_contrasts() -> list[Contrast]:
  return [
      Contrast("M1: no scale's cost with QK-norm minus without (QK-norm x sqrt(d))",
               plus=(("m1_lr_ceiling", "no_scale+qk"), ("m1_lr_ceiling", "paper")),
               minus=(("m1_lr_ceiling", "paper+qk"), ("m1_lr_ceiling", "no_scale"))),
      Contrast("M1: QK-norm's change to scale_sum minus its change to no scale (input size x "
               "QK-norm)",
               plus=(("m1_lr_ceiling", "scale_sum+qk"), ("m1_lr_ceiling", "no_scale")),
               minus=(("m1_lr_ceiling", "scale_sum"), ("m1_lr_ceiling", "no_scale+qk"))),
      Contrast("E3: a norm on the summed input minus sqrt(d), N(0, 1/d)",
               plus=(("e3_pre_ln", "inv_sqrt_d,embed_norm"),),
               minus=(("e3_pre_ln", "inv_sqrt_d,sqrt_d"),)),
      Contrast("E3: a norm on the summed input minus sqrt(d), N(0, 0.02^2)",
               plus=(("e3_pre_ln", "0.02,embed_norm"),), minus=(("e3_pre_ln", "0.02,sqrt_d"),)),
      # A gain is (no scale - sqrt(d)): positive when the scale helps.
      Contrast("E2/E1: sqrt(d)'s gain untied minus its gain tied, N(0, 1/d) (tied arms: E1's)",
               plus=(_e2("inv_sqrt_d", False, "none"), ("e1_tuned", "paper")),
               minus=(_e2("inv_sqrt_d", False, "sqrt_d"), ("e1_tuned", "no_scale"))),
      Contrast("E2: sqrt(d)'s gain untied minus its gain tied, N(0, 0.02^2)",
               plus=(_e2("0.02", False, "none"), _e2("0.02", True, "sqrt_d")),
               minus=(_e2("0.02", False, "sqrt_d"), _e2("0.02", True, "none"))),
      Contrast("E5: no scale at d_model 128 minus at 64",
               plus=(("e5_width", "d_model=128,d_ff=512,embed_scale=none"),),
               minus=(("e5_width", "d_model=64,d_ff=256,embed_scale=none"),),
               sizes=((("e5_width", "d_model=128,d_ff=512,embed_scale=none"),),
                      (("e5_width", "d_model=64,d_ff=256,embed_scale=none"),))),
      Contrast("M3: sqrt(d)'s gain with the sinusoid minus its gain with RoPE (pre-LN)",
               plus=(("m3_no_additive_pe", "sinusoid"), ("m3_no_additive_pe", "rope+sqrt_d")),
               minus=(("m3_no_additive_pe", "sinusoid+sqrt_d"), ("m3_no_additive_pe", "rope"))),
      Contrast("M7: sqrt(d)'s gain untied minus its gain tied (pre-LN, RoPE)",
               plus=(("m7_rope_tying", "pre/untied"), ("m7_rope_tying", "pre/tied+sqrt_d")),
               minus=(("m7_rope_tying", "pre/untied+sqrt_d"), ("m7_rope_tying", "pre/tied"))),
      _across("M9 minus M4: no scale's cost at d_model 256, 4 layers minus at 64, 2 layers "
              "(1200 steps each)",
              plus=(("m9_width_256", "no_scale"), ("m4_penalty_vs_steps", "paper@1200")),
              minus=(("m9_width_256", "paper"), ("m4_penalty_vs_steps", "no_scale@1200"))),
      # The two halves of that difference: each arm at d_model 256, 4 layers minus itself at
      # d_model 64, 2 layers, after the same 1200 steps (absolute test NLL).
      _across("M9 minus M4: no scale at d_model 256, 4 layers minus no scale at 64, 2 layers "
              "(1200 steps each)",
              plus=(("m9_width_256", "no_scale"),),
              minus=(("m4_penalty_vs_steps", "no_scale@1200"),)),
      _across("M9 minus M4: the paper at d_model 256, 4 layers minus the paper at 64, 2 layers "
              "(1200 steps each)",
              plus=(("m9_width_256", "paper"),),
              minus=(("m4_penalty_vs_steps", "paper@1200"),)),
      # The ratio-matched arm against the small model's no scale: the same token/PE ratio at
      # init (0.177), its cost against each size's paper after 1200 steps.
      _across("M9 minus M4: ratio_matched's cost at d_model 256, 4 layers minus no scale's at "
              "64, 2 layers (the same token/PE ratio at init; 1200 steps each)",
              plus=(("m9_width_256", "ratio_matched"), ("m4_penalty_vs_steps", "paper@1200")),
              minus=(("m9_width_256", "paper"), ("m4_penalty_vs_steps", "no_scale@1200"))),
      # Width, depth and length change together here: M1 trained 400 steps, M9 1200.
      _across("M9 minus M1: pe_down minus the paper at d_model 256, 4 layers, 1200 steps minus "
              "at 64, 2 layers, 400 steps",
              plus=(("m9_width_256", "pe_down"), ("m1_lr_ceiling", "paper")),
              minus=(("m9_width_256", "paper"), ("m1_lr_ceiling", "pe_down"))),
      # W1: only the width moves (4 layers, d_k 64, d_ff 4 d_model, 1200 steps each); the head
      # count moves with it. Declared before its first point ran.
      _across("(declared) W1: no scale's cost at d_model 128 minus at 64 (4 layers)",
              plus=(("w1_d128", "no_scale"), ("w1_d64", "paper")),
              minus=(("w1_d128", "paper"), ("w1_d64", "no_scale"))),
      _across("(declared) W1: no scale's cost at d_model 256 minus at 128 (4 layers; 256: M9)",
              plus=(("m9_width_256", "no_scale"), ("w1_d128", "paper")),
              minus=(("m9_width_256", "paper"), ("w1_d128", "no_scale"))),
      _across("W1: no scale's cost at d_model 256 minus at 64 (4 layers; 256: M9)",
              plus=(("m9_width_256", "no_scale"), ("w1_d64", "paper")),
              minus=(("m9_width_256", "paper"), ("w1_d64", "no_scale"))),
      # At one token/PE ratio at init (0.177): d_model 64's no scale, the wider ratio_matched.
      _across("W1: the cost at ratio 0.177, d_model 128 (ratio_matched) minus 64 (no scale)",
              plus=(("w1_d128", "ratio_matched"), ("w1_d64", "paper")),
              minus=(("w1_d128", "paper"), ("w1_d64", "no_scale"))),
      _across("W1: the cost at ratio 0.177, d_model 256 (ratio_matched) minus 128 "
              "(ratio_matched; 256: M9)",
              plus=(("m9_width_256", "ratio_matched"), ("w1_d128", "paper")),
              minus=(("m9_width_256", "paper"), ("w1_d128", "ratio_matched"))),
      _across("W1: the cost at ratio 0.177, d_model 256 (ratio_matched) minus 64 (no scale; "
              "256: M9)",
              plus=(("m9_width_256", "ratio_matched"), ("w1_d64", "paper")),
              minus=(("m9_width_256", "paper"), ("w1_d64", "no_scale"))),
      _across("T2 minus T1: convention (2)'s gap to the paper in test NLL",
              plus=(("t2_translate", "conv2"), ("t1_translate", "paper")),
              minus=(("t2_translate", "paper"), ("t1_translate", "conv2"))),
  ]
