"""A tiny English-German translation model: the base of the translation experiments.

The paper's encoder-decoder (post-LN, sinusoidal PE, sqrt(d_model) embedding scale, one
SentencePiece vocabulary shared by the source and target embeddings and the pre-softmax
projection), d_model 128, 4 heads, 2 + 2 layers, on the German message catalogs installed on
the machine (a real, human-translated corpus of short technical messages; no download):
  python scripts/make_corpus.py --out=data/catalogs_en_de.tsv
  python scripts/train.py --config=configs/translate_tiny.py --workdir=/tmp/mt-tiny
2% of the pairs are held out for validation (choosing settings) and 2.5% for test (reporting);
BLEU (sacrebleu, beam 4) is scored on both at the last step.
"""

from transformer.training.experiment import base_config, model_fields

CATALOGS_TSV = "data/catalogs_en_de.tsv"  # scripts/make_corpus.py's default output


def get_config():
  config = base_config()
  config.model_type = "seq2seq"
  config.model = model_fields("vaswani2017", d_model=128, num_heads=4, d_ff=512,
                              num_encoder_layers=2, num_decoder_layers=2, dropout_rate=0.1)
  config.dataset = "parallel_text"
  config.data_files = CATALOGS_TSV
  config.eval_fraction = 0.02
  config.test_fraction = 0.025
  config.packing = "pack"
  config.tokenizer.vocab_size = 4000
  config.max_len = 64
  config.batch_size = 64
  config.num_train_steps = 1000
  config.learning_rate = 2e-3
  config.warmup_steps = 100
  config.schedule = "rsqrt"
  config.label_smoothing = 0.1
  config.log_every_steps = 50
  config.eval_every_steps = 250
  config.bleu_every_steps = 1000  # BLEU at the last step only: beam search is slow on CPU
  config.diagnostics_every_steps = 250
  config.checkpoint_every_steps = 500
  return config
