"""What the command line runs: the check engine and its simulation, doctor, plan, matrix and docs generation."""
