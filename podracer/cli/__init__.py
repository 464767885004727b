"""The command line: one parse, one module per command, the supervisor of several processes."""
