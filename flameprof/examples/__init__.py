"""Small CPU-only PyTorch programs that ``flameprof demo`` profiles (each runs in a few seconds)."""
