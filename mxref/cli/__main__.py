"""`python -m mxref.cli` (kept for the command lines recorded by the leaderboard)."""
from . import main

main()
