"""``python -m loopctl``: the ``loopctl`` command line (:mod:`loopctl.cli`), for when the script is not on
``PATH`` (loopctl not installed, or an unactivated virtual environment)."""

from loopctl.cli import main

if __name__ == "__main__":
    main(prog_name="loopctl")
