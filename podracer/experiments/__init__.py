"""Many runs: sweeps in turn and elastic pods on Ray, crossing only through files."""
