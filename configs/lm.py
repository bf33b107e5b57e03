"""A decoder-only language model (DecoderOnly, pre-LN) on text, with defaults from the findings.

Trains on local plain-text files (a SentencePiece vocabulary is trained on them once and saved
as WORKDIR/tokenizer.model); rows are cut from the concatenated documents (packing='concat'):
  python scripts/train.py --config=configs/lm.py --workdir=/tmp/lm --config.data_files='books/*.txt'
One line switches the corpus: --config.dataset=tiny_shakespeare, --config.dataset=lm1b
(prepared TFDS datasets), or --config.dataset=synthetic (the embedded task, inputs then
targets as one sequence).

The scale settings are the ones the experiments of docs/findings.md found to train best, each
citing its table below. The paper's recipe (post-LN, tied output, 1/sqrt(d_k), the rsqrt
schedule at the paper's peak rate) is one flag away:
  python scripts/train.py --config=configs/lm.py:paper ...
Those tables come from 2-layer models of d_model 32-128 trained 400 steps (3,000 in E4): the
defaults extrapolate them to this size and length, they do not measure it.
"""

from transformer.errors import ConfigError
from transformer.training.experiment import base_config, model_fields
from transformer.training.optimizer_settings import paper_peak_learning_rate

RECIPES = ("findings", "paper")
D_MODEL = 128


def get_config(recipe: str = "findings"):
  """recipe: 'findings' (the default) or 'paper' (--config=configs/lm.py:paper)."""
  if recipe not in RECIPES:
    raise ConfigError(f"configs/lm.py:{recipe} is not a recipe; use configs/lm.py or "
                      "configs/lm.py:paper.")
  config = base_config()
  config.model_type = "lm"
  sizes = dict(d_model=D_MODEL, num_heads=4, d_ff=4 * D_MODEL, num_encoder_layers=0,
               num_decoder_layers=4, dropout_rate=0.1)
  config.dataset = "text_files"  # needs --config.data_files=FILES_OR_GLOB
  config.text_split = "paragraph"
  config.packing = "concat"
  config.tokenizer.vocab_size = 8000
  config.max_len = 128
  config.batch_size = 32
  config.num_train_steps = 5000
  config.warmup_steps = 200
  config.label_smoothing = 0.0  # the loss is the NLL (the paper's 0.1 was for translation)
  config.log_every_steps = 50
  config.eval_every_steps = 250
  config.checkpoint_every_steps = 250
  if recipe == "paper":
    # The vaswani2017 recipe as it stands (post-LN, sqrt(d) on an N(0, 1/d) embedding, tied
    # output, 1/sqrt(d_k)) and eq. 3's schedule: peak d^-0.5 * warmup^-0.5 (6.25e-3 here;
    # computed once, so a --config.warmup_steps override keeps this peak).
    config.model = model_fields("vaswani2017", **sizes)
    config.schedule = "rsqrt"
    config.learning_rate = paper_peak_learning_rate(D_MODEL, config.warmup_steps)
    return config
  config.model = model_fields(
      "vaswani2017", **sizes,
      # Pre-LN: E3's setting (findings, "E3: pre-LN models"), where sqrt(d) mattered as much.
      norm_position="pre",
      # sqrt(d) on an N(0, 1/d) token embedding, added to the sinusoids: E3's best arm (test
      # NLL 3.449; no scale 0.281 [0.197, 0.366] nats worse; an embedding norm instead: 3.626),
      # and E5: the penalty for dropping it grows with width (0.365 nats at d_model 128).
      embed_scale="sqrt_d", embed_init_std="inv_sqrt_d",
      # Untied output projection: E2's table, better than tied at every init (3.366 against
      # 3.490 with this embedding). It adds vocab x d_model parameters (1.0M here).
      logits_via_embedding=False,
      # 1/d_k instead of 1/sqrt(d_k): E6 ("Question 5"), better at every d_k from 8 to 64
      # (-0.035 [-0.049, -0.022] nats at this d_k, 32), each scale at its own best rate.
      attention_scale="inv_dk")
  # E5's best rate at d_model 128 (5e-3, for both arms; it halves with each doubling of width);
  # E3's pre-LN models took twice the post-LN rate at d_model 64, so this is the cautious end.
  config.learning_rate = 5e-3
  config.schedule = "cosine"  # not an experiment's finding: decays to 0 by num_train_steps
  return config
