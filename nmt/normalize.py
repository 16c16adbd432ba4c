"""Hangul-safe Unicode normalisation applied to every text before tokenisation.

NFKC folds full-width Latin, ligatures and odd spaces, which we want, but it also rewrites Hangul
*compatibility* jamo (ㅋㅋ, ㅠㅠ, standalone ㄱ) into *conjoining* jamo that render as broken syllable
fragments. We therefore compose with NFC first (so decomposed jamo sequences become syllables) and apply
NFKC everywhere except runs of compatibility or half-width jamo.
"""

import re
import unicodedata

_PROTECTED_JAMO = re.compile("([\u3131-\u318e\uffa0-\uffdc]+)")
_CONTROL = re.compile("[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b\u200e\u200f\ufeff]")
_WHITESPACE = re.compile(r"\s+")


def normalize(text: str) -> str:
    """NFC-compose, NFKC-fold outside protected jamo runs, drop control characters, collapse whitespace."""
    text = unicodedata.normalize("NFC", text)
    runs = _PROTECTED_JAMO.split(text)
    # split() with a capturing group alternates: unprotected, protected, unprotected, ...
    text = "".join(run if i % 2 else unicodedata.normalize("NFKC", run) for i, run in enumerate(runs))
    text = _CONTROL.sub("", text)
    return _WHITESPACE.sub(" ", text).strip()
