"""One module per `muster` command: its arguments and its output. The work is done below, in
admission/, webhook/, simulator/ and policies/; muster/cli.py wires the commands' names."""
