"""What a user calls directly: the tour (demo), the doctor, the notebook magics. May import every layer, the programs and analysis."""
