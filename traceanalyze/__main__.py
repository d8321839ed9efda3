from traceanalyze.cli import main

main()
