"""Text helpers for wordcount."""


def split_words(text: str) -> list[str]:
    """The words of ``text``, split on whitespace."""
    # TODO: treat hyphenated words as one word
    return text.split()
