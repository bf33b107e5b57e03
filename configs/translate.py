"""Translation with the paper's encoder-decoder Transformer (small) and a shared vocabulary.

Trains on a local parallel corpus, a TSV of source<TAB>target lines or two line-aligned files;
a SentencePiece vocabulary is trained on both sides once and saved as WORKDIR/tokenizer.model:
  python scripts/train.py --config=configs/translate.py --workdir=/tmp/mt \
      --config.data_files=train.tsv
  python scripts/train.py --config=configs/translate.py --workdir=/tmp/mt \
      --config.data_files=train.de,train.en
or on a prepared TFDS dataset: --config.dataset=wmt14_translate/de-en (or wmt17_translate/de-en),
direction --config.source_lang=de --config.target_lang=en.
"""

from transformer.training.experiment import base_config, model_fields


def get_config():
  config = base_config()
  config.model_type = "seq2seq"
  config.model = model_fields("vaswani2017", d_model=256, num_heads=4, d_ff=1024,
                              num_encoder_layers=3, num_decoder_layers=3, dropout_rate=0.1)
  config.dataset = "parallel_text"  # needs --config.data_files=FILE.tsv or SRC,TGT
  config.packing = "pack"
  config.tokenizer.vocab_size = 8000
  config.max_len = 64
  config.batch_size = 64
  config.num_train_steps = 20000
  config.learning_rate = 1e-3
  config.warmup_steps = 1000
  config.schedule = "rsqrt"
  config.label_smoothing = 0.1
  config.log_every_steps = 100
  config.eval_every_steps = 1000
  config.checkpoint_every_steps = 1000
  return config
