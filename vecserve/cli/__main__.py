"""``python -m vecserve.cli``: the ``vecserve`` command."""

from . import main

if __name__ == "__main__":
    main()
