from onnxmem.cli.main import main

main()
