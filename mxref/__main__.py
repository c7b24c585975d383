"""`python -m mxref`: the `mxref` command line."""
from .cli import main

main(prog_name="mxref")
