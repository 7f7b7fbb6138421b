"""The family templates: each file is a Triton kernel file (kernels, launcher, CONFIG) that
`kernloop.families.template` reads as text and fills in for one spec."""
