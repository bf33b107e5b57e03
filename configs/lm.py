"""A decoder-only language model (DecoderOnly, pre-LN as GPT-style models train it) on text.

Trains on local plain-text files (a SentencePiece vocabulary is trained on them once and saved
as WORKDIR/tokenizer.model); rows are cut from the concatenated documents (packing='concat'):
  python scripts/train.py --config=configs/lm.py --workdir=/tmp/lm --config.data_files='books/*.txt'
One line switches the corpus: --config.dataset=tiny_shakespeare, --config.dataset=lm1b
(prepared TFDS datasets), or --config.dataset=synthetic (the embedded task, inputs then
targets as one sequence).
"""

from transformer.training.experiment import base_config, model_fields


def get_config():
  config = base_config()
  config.model_type = "lm"
  config.model = model_fields("vaswani2017", d_model=128, num_heads=4, d_ff=512,
                              num_encoder_layers=0, num_decoder_layers=4, norm_position="pre",
                              dropout_rate=0.1)
  config.dataset = "text_files"  # needs --config.data_files=FILES_OR_GLOB
  config.text_split = "paragraph"
  config.packing = "concat"
  config.tokenizer.vocab_size = 8000
  config.max_len = 128
  config.batch_size = 32
  config.num_train_steps = 5000
  config.learning_rate = 1e-3
  config.warmup_steps = 200
  config.schedule = "cosine"
  config.label_smoothing = 0.0
  config.log_every_steps = 50
  config.eval_every_steps = 250
  config.checkpoint_every_steps = 250
  return config
