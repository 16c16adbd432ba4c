"""Split running text into sentences so long inputs are translated piece by piece, never truncated."""

import re

# A sentence ends at . ! ? … or their full-width forms (plus closing quotes/brackets) followed by space.
# Abbreviations like "e.g." or "Mr." are kept whole by requiring the next word to start a sentence.
_BOUNDARY = re.compile(r"(?<=[.!?…。！？])[\"'”’)\]]*\s+(?=[\"'“‘(\[]?[A-Z0-9가-힣ㄱ-ㅎ一-龥])")
_ABBREVIATION = re.compile(r"(?:\b(?:Mr|Mrs|Ms|Dr|Prof|Sr|Jr|St|vs|etc|e\.g|i\.e|No|Vol|Fig)|\b[A-Z])\.$")


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` in order; text without a boundary comes back as one sentence."""
    text = text.strip()
    if not text:
        return []
    sentences: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        candidate = text[start : match.start()].rstrip()
        if _ABBREVIATION.search(candidate):
            continue
        sentences.append(text[start : match.end()].strip())
        start = match.end()
    sentences.append(text[start:].strip())
    return [s for s in sentences if s]
