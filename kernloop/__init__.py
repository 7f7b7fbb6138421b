"""KernLoop: a spec in, a faster kernel out, proven by a judge that hostile candidates cannot fool."""
