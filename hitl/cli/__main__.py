"""`python -m hitl.cli`: the `hitl` command."""

from hitl.cli import main

if __name__ == "__main__":
    main()
