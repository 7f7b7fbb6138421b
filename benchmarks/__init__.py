"""GPU benchmarks and validations whose results are in results/ (run by hand, one script each)."""
