"""Reserved token ids: distinct, below NUM_RESERVED, and what every tokenizer and model uses."""

import jax
import numpy as np

from transformer import token_ids
from transformer.config import ModelConfig
from transformer.data.tokenizer import ByteTokenizer, SyntheticTokenizer, Tokenizer
from transformer.models import Transformer, shift_right


def test_reserved_ids_are_distinct_and_below_the_first_symbol():
  reserved = (token_ids.PAD_ID, token_ids.EOS_ID, token_ids.UNK_ID)
  assert len(set(reserved)) == 3 and max(reserved) < token_ids.NUM_RESERVED
  assert (Tokenizer.pad_id, Tokenizer.eos_id, Tokenizer.unk_id) == reserved


def test_tokenizers_give_symbols_ids_above_the_reserved_ones():
  for tok, text in ((ByteTokenizer(), "any text ü"),
                    (SyntheticTokenizer("reverse", 10), "a b c"),
                    (SyntheticTokenizer("addition", 10), "12+9")):
    ids = tok.encode(text)
    assert ids and min(ids) >= token_ids.NUM_RESERVED, (tok, ids)
    # Decoding stops at EOS and drops padding.
    assert tok.decode(ids + [token_ids.EOS_ID] + ids) == tok.decode(
        [token_ids.PAD_ID] + ids) == tok.decode(ids)


def test_the_model_starts_decoding_at_pad_and_ignores_pad_keys():
  np.testing.assert_array_equal(np.asarray(shift_right(np.array([[7, 8, 9]]))),
                                [[token_ids.PAD_ID, 7, 8]])
  config = ModelConfig(vocab_size=16, d_model=32, num_heads=2, d_ff=64, num_encoder_layers=1,
                       num_decoder_layers=1, max_len=8)
  model = Transformer(config)
  inputs, targets = np.array([[5, 6, 7, 0]]), np.array([[8, 9, 0, 0]])
  params = model.init(jax.random.key(0), inputs, targets)
  base = np.asarray(model.apply(params, inputs, targets))[0, :2]
  # PAD in the source is masked out of attention; any other id, reserved or not, is attended.
  for last, same in ((token_ids.PAD_ID, True), (token_ids.EOS_ID, False),
                     (token_ids.UNK_ID, False)):
    more = np.array([[5, 6, 7, 0, last, 0]])
    got = np.asarray(model.apply(params, more, targets))[0, :2]
    assert np.allclose(got, base, atol=1e-6) == same, last
