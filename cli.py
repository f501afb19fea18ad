"""Run the onnxmem command line from a source checkout: ``python cli.py plan MODEL``."""

from onnxmem.cli.main import run

if __name__ == "__main__":
    run()
