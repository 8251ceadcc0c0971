"""What a user calls directly: the tour (demo), the doctor, the notebook magics, and the plumbing around the
invoke tasks (cli). May import every layer, the programs and analysis."""
