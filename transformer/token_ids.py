"""The reserved token ids, the one place they are defined.

pad (0) is masked out of attention and the loss, eos (1) ends a sequence, unk (2) stands for a
symbol the vocabulary lacks. Every tokenizer, the models' masks and decoding use these.
"""

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2
NUM_RESERVED = 3  # ids below this are reserved; vocabularies start their symbols here
