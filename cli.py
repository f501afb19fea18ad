"""Run the onnxmem command line from a source checkout: ``python cli.py plan MODEL``."""

from onnxmem.cli.main import main

if __name__ == "__main__":
    main()
