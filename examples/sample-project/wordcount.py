"""Count lines, words and characters in a text file."""

import sys

from textutils import split_words


def count(text: str) -> tuple[int, int, int]:
    """Lines, words and characters of ``text``."""
    # TODO: count a last line that has no trailing newline
    lines = text.count("\n")
    words = len(split_words(text))
    return lines, words, len(text)


def main(argv: list[str]) -> int:
    # TODO: accept several files and print a total line
    path = argv[1]
    with open(path, encoding="utf-8") as f:
        lines, words, chars = count(f.read())
    print(f"{lines:7} {words:7} {chars:7} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
