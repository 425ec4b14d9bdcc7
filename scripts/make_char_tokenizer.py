"""Write an offline Hugging Face tokenizer directory for AIPerf (scripts/aiperf.sh setup).

AIPerf needs a tokenizer to cut its prompt corpus into token blocks; without HuggingFace
access we build one locally. Every printable non-space character is one token, and
decoding puts a single space between tokens. The embedded engine (workbench sim serve)
counts whitespace-separated words (workbench/tokenizer.py), so a prompt AIPerf builds
from N tokens reaches the engine as exactly N tokens, and equal token blocks stay equal
words (prefix-cache hits survive the text round trip).

    python scripts/make_char_tokenizer.py OUT_DIR      (needs tokenizers + transformers)
"""

from __future__ import annotations

import sys
import unicodedata


def vocabulary() -> dict[str, int]:
    """``[UNK]``, ``<eos>``, then every printable non-space character of the BMP."""
    vocab = {"[UNK]": 0, "<eos>": 1}
    for code in range(0x21, 0x3000):
        ch = chr(code)
        if ch.isprintable() and not ch.isspace() and unicodedata.category(ch)[0] != "M":
            vocab[ch] = len(vocab)
    return vocab


def main(out: str) -> None:
    from tokenizers import (  # type: ignore[import-not-found]  # the AIPerf venv has it
        Regex,
        Tokenizer,
        models,
        pre_tokenizers,
    )
    from transformers import PreTrainedTokenizerFast  # type: ignore[import-not-found]

    tok = Tokenizer(models.WordLevel(vocab=vocabulary(), unk_token="[UNK]"))
    # whitespace separates, then each remaining character is a token of its own
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex("."), "isolated")]
    )
    # no decoder: tokens are joined with single spaces
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", eos_token="<eos>",
        clean_up_tokenization_spaces=False, model_max_length=1_000_000,
    )  # fmt: skip
    fast.save_pretrained(out)
    probe = "def f(x):  return x+1 # ok"
    ids = fast.encode(probe, add_special_tokens=False)
    text = fast.decode(ids)
    if len(text.split()) != len(ids) or fast.encode(text, add_special_tokens=False) != ids:
        sys.exit(f"tokenizer round trip broken: {ids} -> {text!r}")
    print(f"{out}: {len(fast)} tokens, round trip ok")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
