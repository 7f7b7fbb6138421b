"""GPU benchmarks and validations, one script each, run by hand (README.md here lists them); their JSON
is in benchmarks/results/."""
