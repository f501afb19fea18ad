from onnxmem.cli.main import run

run()
