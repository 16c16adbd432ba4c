"""Korean<->English neural machine translation: tokenizer, Transformer, beam search, checkpoints, translator."""

__version__ = "0.1.0"
