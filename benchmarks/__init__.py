"""GPU benchmarks and validations whose results are in benchmarks/results/ (run by hand, one script each)."""
